-- Envoy's rate limit service: one or more requests of one domain (one
-- slot), decided in order, each exactly as it would be alone in a script
-- of its own; each request's hits decided together, mirroring
-- limits/rls's Decide (decide.go) exactly: a token bucket kept as its
-- level (tokens, fractional) at an instant (Unix µs), or an
-- epoch-aligned fixed window kept as its index and count; when a hit that
-- is not soft is over its limit, the request writes nothing.
-- KEYS: the requests' counters, each once, all under the domain's hash
-- tag. Each is a string of two little-endian doubles, A and B: a token
-- bucket's instant and level, or a fixed window's index and count, with a
-- TTL to the instant it is the same as no key (full again, or its window
-- over).
-- ARGV[1] the numbers, little-endian doubles: milliseconds added to every
-- TTL (0; the package's tests, whose clock is not Redis's, keep keys
-- longer: a key kept past its TTL reads as what its absence means); then
-- per request: its number of hits H, whether it brings its now (1, then
-- now in Unix µs; or 0 0 for Redis TIME, read once), then H hits of 7:
-- its key's index in KEYS, the algorithm (1 token bucket, 2 fixed
-- window), the limit, the period (µs), the hits (at most limit + 1),
-- refund (0/1), soft (0/1).
-- Returns one string of little-endian doubles, per request in order:
-- granted (0/1), then 4 per hit: over (0/1), remaining, reset (µs), retry
-- after (µs; -1 never; 0 when not over).
--
-- The arithmetic is limits/rls's float64 arithmetic, in the same order.
-- The counters are read at once (MGET) and each written once, after the
-- last request (SET with its TTL, or DEL): the writes of the requests
-- before are seen only by the requests after, which see them here as
-- they would in Redis.

local floor, ceil, max, min, tonumber = math.floor, math.ceil, math.max, math.min, tonumber
local pack, unpackd, concat = struct.pack, struct.unpack, table.concat
local call, KEYS = redis.call, KEYS

local nk = #KEYS
local vals
if nk <= 1000 then
  vals = call('MGET', unpack(KEYS))
else -- unpack's bound: the C stack
  vals = {}
  for i = 1, nk, 1000 do
    local got = call('MGET', unpack(KEYS, i, min(i + 999, nk)))
    for j = 1, #got do vals[i + j - 1] = got[j] end
  end
end
-- cur[i]: counter i as the requests so far left it: set, a, b, and, once
-- written, the TTL to write it with (ms; ≤ 0: delete it).
local cur = {}
for i = 1, nk do
  local s = {set = false, a = 0, b = 0, ttl = nil}
  local v = vals[i]
  if v and #v == 16 then
    local a, b = unpackd('<dd', v)
    if a == a and b == b then s.set, s.a, s.b = true, a, b end -- (not NaN)
  end
  cur[i] = s
end

local function untilfull(level, lim, period) return ceil(((lim - level) * period) / lim) end

-- step is one hit on the counter s at now: over, remaining, reset, retry
-- after; when write and the hit changes s, s takes the new state and u,
-- the instant (µs) it is the same as none.
local function step(s, now, alg, lim, period, k, refund, write)
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
      s.set, s.a, s.b, s.u, s.dirty = true, now, level, now + reset, true
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
    s.set, s.a, s.b, s.u, s.dirty = true, w, count, wend, true
  end
  return 0, lim - count, wend - now, 0
end

local nums = ARGV[1]
local extra, pos = unpackd('<d', nums)
local redisNow
local out = {}       -- the reply, a string per request
local hits, res = {}, {} -- the request's hits and answers (reused)
while pos <= #nums do
  local nh, hasNow, now
  nh, hasNow, now, pos = unpackd('<ddd', nums, pos)
  if hasNow == 0 then
    if not redisNow then
      local t = call('TIME')
      redisNow = tonumber(t[1]) * 1000000 + tonumber(t[2])
    end
    now = redisNow
  end
  -- work: the request's counters as it changes them (copies of cur's).
  local work = {}
  for h = 1, nh do
    local x = hits[h]
    if not x then x = {}; hits[h] = x end
    x[1], x[2], x[3], x[4], x[5], x[6], x[7], pos = unpackd('<ddddddd', nums, pos)
    local ki = x[1]
    if not work[ki] then
      local c = cur[ki]
      work[ki] = {set = c.set, a = c.a, b = c.b, dirty = false}
    end
  end
  local granted = 1
  for h = 1, nh do
    local x = hits[h]
    local r = res[h]
    if not r then r = {}; res[h] = r end
    r[1], r[2], r[3], r[4] = step(work[x[1]], now, x[2], x[3], x[4], x[5], x[6] == 1, true)
    if r[1] == 1 and x[7] ~= 1 then granted = 0 end
  end
  if granted == 1 then
    for ki, s in pairs(work) do
      if s.dirty then
        local c = cur[ki]
        local ttl = ceil((s.u - now) / 1000)
        if ttl > 0 then
          c.set, c.a, c.b, c.ttl = true, s.a, s.b, ttl + extra
        else -- the same as none: deleted
          c.set, c.a, c.b, c.ttl = false, 0, 0, 0
        end
      end
    end
  else
    -- Refused: the hits not over answer what their counters have.
    for h = 1, nh do
      local r = res[h]
      if r[1] == 0 then
        local x = hits[h]
        local _
        _, r[2], r[3], r[4] = step(cur[x[1]], now, x[2], x[3], x[4], 0, false, false)
      end
    end
  end
  local parts = {pack('<d', granted)}
  for h = 1, nh do
    local r = res[h]
    parts[h + 1] = pack('<dddd', r[1], r[2], r[3], r[4])
  end
  out[#out + 1] = concat(parts)
end

for i = 1, nk do
  local c = cur[i]
  if c.ttl then
    if c.ttl <= 0 then
      call('DEL', KEYS[i])
    else
      call('SET', KEYS[i], pack('<dd', c.a, c.b), 'PX', c.ttl)
    end
  end
end
return concat(out)
