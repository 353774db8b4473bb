-- Envoy's rate limit service: one request's hits decided together,
-- mirroring limits/rls's Decide (decide.go) exactly: a token bucket kept
-- as the instant it is empty (Unix µs), or an epoch-aligned fixed window
-- kept as its index and count; when a hit that is not soft is over its
-- limit, nothing is written.
-- KEYS: the request's counters, each once, all under the domain's hash
-- tag (one slot). Each is a string: "A" (token bucket: the instant it is
-- empty) or "A N" (fixed window: its index and count), with a TTL to the
-- instant it is the same as no key (full again, or its window over).
-- ARGV[1] now in Unix µs ("" for Redis TIME); ARGV[2] the number of hits;
-- then 7 per hit: its key's index in KEYS, the algorithm (1 token bucket,
-- 2 fixed window), the limit, the period (µs), the hits (at most limit +
-- 1), refund (0/1), soft (0/1).
-- Returns: granted (0/1), then 4 per hit: over (0/1), remaining, reset
-- (µs), retry after (µs; -1 never; 0 when not over).
--
-- Every quantity is an integer below 2^53 but the products inside cost
-- and tokens, which are computed as limits/rls computes them in float64.

local floor, ceil, max, min, tonumber, format, match = math.floor, math.ceil, math.max, math.min, tonumber, string.format, string.match

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local vals = redis.call('MGET', unpack(KEYS))
local stored, work = {}, {}
for i = 1, #KEYS do
  local s = {set = false, a = 0, n = 0}
  local v = vals[i]
  if v then
    local a, c = match(v, '^(%-?%d+) ?(%d*)$')
    if a then
      s.set, s.a, s.n = true, tonumber(a), tonumber(c) or 0
    end
  end
  stored[i] = s
  work[i] = {set = s.set, a = s.a, n = s.n, u = 0, alg = 0, dirty = false}
end

local function cost(k, lim, period) return ceil((k * period) / lim) end
local function tokens(e, lim, period)
  if e >= now then return 0 end
  return min(lim, floor(((now - e) * lim) / period))
end

-- step is one hit on the counter s: over, remaining, reset, retry after;
-- when write and the hit changes s, s takes the new state.
local function step(s, alg, lim, period, k, refund, write)
  if alg == 1 then
    local e = now - period
    if s.set and s.a > e then e = s.a end
    if refund then
      e = max(e - cost(min(k, lim), lim, period), now - period)
    elseif k > lim then
      return 1, tokens(e, lim, period), e + period - now, -1
    else
      local c = cost(k, lim, period)
      if c > now - e then return 1, tokens(e, lim, period), e + period - now, c - (now - e) end
      e = e + c
    end
    if write and (k > 0 or refund) then
      s.set, s.a, s.u, s.alg, s.dirty = true, e, e + period, 1, true
    end
    return 0, tokens(e, lim, period), e + period - now, 0
  end
  local w = floor(now / period)
  local count = 0
  if s.set and s.a == w then count = s.n end
  local wend = (w + 1) * period
  if refund then
    count = max(0, count - k)
  elseif k > lim then
    return 1, lim - count, wend - now, -1
  elseif k > lim - count then
    return 1, lim - count, wend - now, wend - now
  elseif k == 0 then
    return 0, lim - count, wend - now, 0
  else
    count = count + k
  end
  if write then
    s.set, s.a, s.n, s.u, s.alg, s.dirty = true, w, count, wend, 2, true
  end
  return 0, lim - count, wend - now, 0
end

local nh = tonumber(ARGV[2])
local out = {1}
local granted = 1
for h = 1, nh do
  local b = 3 + (h - 1) * 7
  local ki, alg, lim, period, k = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local over, rem, reset, retry = step(work[ki], alg, lim, period, k, ARGV[b + 5] == '1', true)
  if over == 1 and ARGV[b + 6] ~= '1' then granted = 0 end
  local o = 2 + (h - 1) * 4
  out[o], out[o + 1], out[o + 2], out[o + 3] = over, rem, reset, retry
end

if granted == 1 then
  for i = 1, #KEYS do
    local s = work[i]
    if s.dirty then
      local ttl = ceil((s.u - now) / 1000)
      if ttl <= 0 then
        redis.call('DEL', KEYS[i])
      elseif s.alg == 1 then
        redis.call('SET', KEYS[i], format('%.0f', s.a), 'PX', ttl)
      else
        redis.call('SET', KEYS[i], format('%.0f %.0f', s.a, s.n), 'PX', ttl)
      end
    end
  end
else
  -- Refused: the hits not over answer what their counters have.
  for h = 1, nh do
    local o = 2 + (h - 1) * 4
    if out[o] == 0 then
      local b = 3 + (h - 1) * 7
      local ki = tonumber(ARGV[b])
      local _, rem, reset, retry = step(stored[ki], tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), 0, false, false)
      out[o + 1], out[o + 2], out[o + 3] = rem, reset, retry
    end
  end
end
out[1] = granted
return out
