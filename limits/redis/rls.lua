-- Envoy's rate limit service: one request's hits decided together,
-- mirroring limits/rls's Decide (decide.go) exactly: a token bucket kept
-- as its level (tokens, fractional) at an instant (Unix µs), or an
-- epoch-aligned fixed window kept as its index and count; when a hit that
-- is not soft is over its limit, nothing is written.
-- KEYS: the request's counters, each once, all under the domain's hash
-- tag (one slot). Each is a string of two little-endian doubles, A and
-- B: a token bucket's instant and level, or a fixed window's index and
-- count, with a TTL to the instant it is the same as no key (full again,
-- or its window over).
-- ARGV[1] now in Unix µs ("" for Redis TIME); ARGV[3] milliseconds
-- added to every TTL (0; the package's tests, whose clock is not Redis's,
-- keep keys longer: a key kept past its TTL reads as what its absence
-- means); ARGV[2] the hits, 7
-- little-endian doubles each: its key's index in KEYS, the algorithm (1
-- token bucket, 2 fixed window), the limit, the period (µs), the hits (at
-- most limit + 1), refund (0/1), soft (0/1).
-- Returns: granted (0/1), then 4 per hit: over (0/1), remaining, reset
-- (µs), retry after (µs; -1 never; 0 when not over).
--
-- The arithmetic is limits/rls's float64 arithmetic, in the same order.

local floor, ceil, max, min, tonumber = math.floor, math.ceil, math.max, math.min, tonumber
local pack, unpackd = struct.pack, struct.unpack

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
  local s = {set = false, a = 0, b = 0}
  local v = vals[i]
  if v and #v == 16 then
    local a, b = unpackd('<dd', v)
    if a == a and b == b then s.set, s.a, s.b = true, a, b end -- (not NaN)
  end
  stored[i] = s
  work[i] = {set = s.set, a = s.a, b = s.b, u = 0, alg = 0, dirty = false}
end

local function untilfull(level, lim, period) return ceil(((lim - level) * period) / lim) end

-- step is one hit on the counter s: over, remaining, reset, retry after;
-- when write and the hit changes s, s takes the new state.
local function step(s, alg, lim, period, k, refund, write)
  if alg == 1 then
    local level = lim
    if s.set then level = min(lim, s.b + (max(0, now - s.a) * lim) / period) end
    if refund then
      level = min(lim, level + k)
    elseif k > lim then
      return 1, floor(level), untilfull(level, lim, period), -1
    elseif k > level then
      return 1, floor(level), untilfull(level, lim, period), ceil(((k - level) * period) / lim)
    elseif k == 0 then
      return 0, floor(level), untilfull(level, lim, period), 0
    else
      level = level - k
    end
    local reset = untilfull(level, lim, period)
    if write then
      s.set, s.a, s.b, s.u, s.alg, s.dirty = true, now, level, now + reset, 1, true
    end
    return 0, floor(level), reset, 0
  end
  local w = floor(now / period)
  local count = 0
  if s.set and s.a == w then count = s.b end
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
    s.set, s.a, s.b, s.u, s.alg, s.dirty = true, w, count, wend, 2, true
  end
  return 0, lim - count, wend - now, 0
end

local hits = {}
do
  local packed, pos = ARGV[2], 1
  for h = 1, #packed / 56 do
    local ki, alg, lim, period, k, refund, soft
    ki, alg, lim, period, k, refund, soft, pos = unpackd('<ddddddd', packed, pos)
    hits[h] = {ki, alg, lim, period, k, refund == 1, soft == 1}
  end
end
local nh = #hits
local out = {1}
local granted = 1
for h = 1, nh do
  local x = hits[h]
  local over, rem, reset, retry = step(work[x[1]], x[2], x[3], x[4], x[5], x[6], true)
  if over == 1 and not x[7] then granted = 0 end
  local o = 2 + (h - 1) * 4
  out[o], out[o + 1], out[o + 2], out[o + 3] = over, rem, reset, retry
end

if granted == 1 then
  for i = 1, #KEYS do
    local s = work[i]
    if s.dirty then
      local ttl = ceil((s.u - now) / 1000)
      if ttl > 0 then ttl = ttl + tonumber(ARGV[3]) end
      if ttl <= 0 then
        redis.call('DEL', KEYS[i])
      else
        redis.call('SET', KEYS[i], pack('<dd', s.a, s.b), 'PX', ttl)
      end
    end
  end
else
  -- Refused: the hits not over answer what their counters have.
  for h = 1, nh do
    local o = 2 + (h - 1) * 4
    if out[o] == 0 then
      local x = hits[h]
      local _, rem, reset, retry = step(stored[x[1]], x[2], x[3], x[4], 0, false, false)
      out[o + 1], out[o + 2], out[o + 3] = rem, reset, retry
    end
  end
end
out[1] = granted
return out
