-- Envoy's rate limit service: one or more requests of one domain (one
-- slot), decided in order, each exactly as it would be alone in a script
-- of its own; each request's hits decided together, mirroring
-- limits/rls's Decide (decide.go) exactly: a token bucket kept as its
-- level (tokens, fractional) at an instant (Unix µs), or an
-- epoch-aligned fixed window kept as its index and count, or a calendar's
-- window kept as its start (Unix µs) and count; when a hit that is not
-- soft is over its limit, the request writes nothing.
-- KEYS: the requests' counters, each once, all under the domain's hash
-- tag. Each is a string of three little-endian doubles, A, B and X: a
-- token bucket's instant and level, or a fixed window's index and count,
-- and the instant (ms) until which the key lives. (A string of A and B
-- alone, as servers of before 2026-11-27 wrote, reads the same, its X
-- unknown.)
-- ARGV[1] the numbers, little-endian doubles: milliseconds added to every
-- TTL (0; the package's tests, whose clock is not Redis's, keep keys
-- longer), whether the requests bring their now (1; 0 for Redis TIME,
-- read once); then per request: its number of hits H, its now (Unix µs)
-- if they bring it, then H hits of 6 to 8: its key's index in KEYS, the
-- algorithm (1 token bucket, 2 fixed window, 3 token bucket with a depth
-- of its own, 4 calendar window), the limit, the period (µs), the hits (at
-- most the depth + 1), and refund + 2 × soft (each 0/1); then, for 3, the
-- depth (tokens), for 4, the window's start and end (Unix µs, as the
-- server's clock places them: Redis has no time zones).
-- Returns one string of little-endian doubles, per request in order:
-- granted (0/1), then 4 per hit: over (0/1), remaining, reset (µs), retry
-- after (µs; -1 never; 0 when not over).
--
-- The arithmetic is limits/rls's float64 arithmetic, in the same order.
--
-- A counter's key must live until its state is the same as none (a token
-- bucket full again, a window over); a key kept longer reads as what its
-- absence means, so, as take.lua does, a write sets the TTL (SET with PX,
-- and X with it) to three seconds past that only when X is earlier, and
-- otherwise overwrites A and B in place (SETRANGE, which keeps the TTL):
-- a key expires up to three seconds after its state is the same as none,
-- and a counter in use has its key made and its TTL set at most once in
-- three seconds, not on every request. A write that makes the state the
-- same as none deletes the key.
--
-- Cost: the counters are read at once (MGET) and each written once, after
-- the last request: the writes of the requests before are seen only by
-- the requests after, which see them here as they would in Redis. The
-- numbers are read, and the answers written, with one struct call per
-- thousand; the counters live in arrays, not a table each: Lua's tables
-- and its calls are this script's main cost.

local floor, ceil, min, tonumber = math.floor, math.ceil, math.min, tonumber
local pack, unpackd, concat, rep, unpack = struct.pack, struct.unpack, table.concat, string.rep, unpack
local call, KEYS = redis.call, KEYS

-- doubles returns the n little-endian doubles of s from byte pos on, as
-- an array (whose n + 1st element may be struct.unpack's next position).
local function doubles(s, pos, n)
  if n <= 1000 then return {unpackd('<' .. rep('d', n), s, pos)} end
  local t, i = {}, 0
  while i < n do
    local k = min(1000, n - i)
    local part = {unpackd('<' .. rep('d', k), s, pos + 8 * i)}
    for j = 1, k do t[i + j] = part[j] end
    i = i + k
  end
  return t
end

-- copy returns a copy of t's first n elements: unpack's, which makes the
-- table at its size at once, up to unpack's bound (the C stack, about
-- 8 000 values: a script of many requests of many hits has more), else
-- element by element.
local function copy(t, n)
  if n <= 4000 then return {unpack(t, 1, n)} end
  local c = {}
  for i = 1, n do c[i] = t[i] end
  return c
end

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
-- Counter i as the requests so far left it: A (false when not held) and
-- B; X, its key's expiry as stored (0: none, or unknown); once written,
-- ttl (ms from its writer's now; ≤ 0: delete the key; false: not
-- written) and need (the instant, ms, it must live until). (Tables made
-- as copies of vals have their nk slots at once: filled one by one, a
-- table grows, and is rehashed, five times for 15 keys.)
local ca, cb, cx, cttl, cneed
if nk <= 4000 then
  ca, cb, cx, cttl, cneed = {unpack(vals)}, {unpack(vals)}, {unpack(vals)}, {unpack(vals)}, {unpack(vals)}
else
  ca, cb, cx, cttl, cneed = copy(vals, nk), copy(vals, nk), copy(vals, nk), copy(vals, nk), copy(vals, nk)
end
for i = 1, nk do
  local v, a, b, x = vals[i], false, 0, 0
  if v then
    local n = #v
    if n == 24 then
      a, b, x = unpackd('<ddd', v)
    elseif n == 16 then
      a, b = unpackd('<dd', v)
    end
    if a ~= a or b ~= b then a, b, x = false, 0, 0 end -- (NaN)
  end
  ca[i], cb[i], cx[i], cttl[i] = a, b, x, false
end

-- Lua's arithmetic rather than math's functions, which are calls (and
-- a call is, after a Redis command, this script's dearest operation):
-- for x ≥ 0, x % 1 is x − floor(x) exactly, so x − x % 1 is math.floor(x)
-- and, when below x, that plus 1 is math.ceil(x). (Every quantity
-- rounded here is ≥ 0 for any state a script wrote; math's functions
-- take the others.) The comparisons are math.min's and math.max's.

-- up returns math.ceil(x).
local function up(x)
  if not (x >= 0) then return ceil(x) end
  local f = x - x % 1
  if f < x then return f + 1 end
  return f
end

-- step is one hit of k on a counter held as a (false: not held) and b, at
-- now: over, remaining, reset, retry after, then, when the hit changes
-- the counter, true and its new A, B and the instant (µs) it is the same
-- as none. x and y are a hit's extra numbers (see ARGV).
local function step(a, b, now, alg, lim, period, k, refund, x, y)
  if alg == 1 or alg == 3 then
    local top = lim -- the depth
    if alg == 3 then top = x end
    local level = top
    if a then
      local d = now - a
      if not (d > 0) then d = 0 end
      level = b + (d * lim) / period
      if not (level < top) then level = top end
    end
    if refund then
      level = level + k
      if not (level < top) then level = top end
    elseif k > top then
      return 1, level >= 0 and level - level % 1 or floor(level), up(((top - level) * period) / lim), -1
    elseif k > level then
      return 1, level >= 0 and level - level % 1 or floor(level), up(((top - level) * period) / lim), up(((k - level) * period) / lim)
    elseif k == 0 then
      return 0, level >= 0 and level - level % 1 or floor(level), up(((top - level) * period) / lim), 0
    else
      level = level - k
    end
    -- untilfull, inline: the common case.
    local reset = ((top - level) * period) / lim
    if reset >= 0 then
      local f = reset - reset % 1
      if f < reset then f = f + 1 end
      reset = f
    else
      reset = ceil(reset)
    end
    return 0, level >= 0 and level - level % 1 or floor(level), reset, 0, true, now, level, now + reset
  end
  local w, wend
  local count = 0
  if alg == 4 then
    -- A calendar's window, from its start; a later window's state (begun
    -- by a server whose clock is ahead) is counted in.
    w, wend = x, y
    if a and a >= w then w, count = a, b end
    if not (wend > now) then wend = now + 1 end
  else
    w = now / period
    if w >= 0 then w = w - w % 1 else w = floor(w) end
    if a and a == w then count = b end
    wend = (w + 1) * period
  end
  if refund then
    count = count - k
    if not (count > 0) then count = 0 end
  elseif k > lim then
    return 1, lim - count, wend - now, -1
  elseif k > lim - count then
    return 1, lim - count, wend - now, wend - now
  elseif k == 0 then
    return 0, lim - count, wend - now, 0
  else
    count = count + k
  end
  return 0, lim - count, wend - now, 0, true, w, count, wend
end

local nums = ARGV[1]
local total = #nums / 8
local N = doubles(nums, 1, total)
local extra, callerNow = N[1], N[2] == 1
local p = 3 -- the next number in N
local redisNow
-- The reply's numbers: fewer than N's, so a copy of N has room.
local out, no
if total <= 4000 then out, no = {unpack(N, 1, total)}, 0 else out, no = copy(N, total), 0 end
-- A request of several hits: its counters as it changes them (valid
-- where wreq is the request's number): A, B, the instant they are the
-- same as none, changed; and its counters, each once.
local wreq, wa, wb, wu, wdirty, touched
local r = 0
while p <= total do
  r = r + 1
  local nh, now = N[p], redisNow
  if callerNow then
    now, p = N[p + 1], p + 2
  else
    if not now then
      local t = call('TIME')
      redisNow = tonumber(t[1]) * 1000000 + tonumber(t[2])
      now = redisNow
    end
    p = p + 1
  end
  local changed, ki, a, b, u
  if nh == 1 then
    -- One hit: granted unless over and not soft; then it changes its
    -- counter, if at all.
    ki = N[p]
    local over, rem, reset, retry
    local flags = N[p + 5]
    local alg = N[p + 1]
    if alg < 3 then
      over, rem, reset, retry, changed, a, b, u = step(ca[ki], cb[ki], now, alg, N[p + 2], N[p + 3], N[p + 4], flags % 2 == 1)
      p = p + 6
    else
      over, rem, reset, retry, changed, a, b, u = step(ca[ki], cb[ki], now, alg, N[p + 2], N[p + 3], N[p + 4], flags % 2 == 1, N[p + 6], N[p + 7])
      p = p + alg + 4 -- (7 numbers for 3, 8 for 4)
    end
    if over == 0 or flags >= 2 then out[no + 1] = 1 else out[no + 1] = 0 end
    out[no + 2], out[no + 3], out[no + 4], out[no + 5] = over, rem, reset, retry
    no = no + 5
    if changed then
      local ttl = up((u - now) / 1000)
      if ttl > 0 then
        ca[ki], cb[ki], cttl[ki], cneed[ki] = a, b, ttl + extra, now / 1000 + ttl + extra
      else -- the same as none: deleted
        ca[ki], cb[ki], cttl[ki] = false, 0, 0
      end
    end
  else
    if not wreq then
      -- Made at their size at once, as ca and the others (a request's
      -- marks, vals' strings and falses, are never a request's number).
      if nk <= 4000 then
        wreq, wa, wb, wu, wdirty, touched = {unpack(vals)}, {unpack(vals)}, {unpack(vals)}, {unpack(vals)}, {unpack(vals)}, {unpack(vals)}
      else
        wreq, wa, wb, wu, wdirty, touched = copy(vals, nk), copy(vals, nk), copy(vals, nk), copy(vals, nk), copy(vals, nk), copy(vals, nk)
      end
    end
    local first, nt = p, 0
    local o = no + 1 -- granted's place in out
    local granted = 1
    for _ = 1, nh do
      ki = N[p]
      if wreq[ki] ~= r then
        wreq[ki], wa[ki], wb[ki], wdirty[ki] = r, ca[ki], cb[ki], false
        nt = nt + 1
        touched[nt] = ki
      end
      local over, rem, reset, retry
      local flags = N[p + 5]
      local alg = N[p + 1]
      over, rem, reset, retry, changed, a, b, u = step(wa[ki], wb[ki], now, alg, N[p + 2], N[p + 3], N[p + 4], flags % 2 == 1, N[p + 6], N[p + 7])
      if changed then
        wa[ki], wb[ki], wu[ki], wdirty[ki] = a, b, u, true
      end
      if over == 1 and flags < 2 then granted = 0 end
      out[no + 2], out[no + 3], out[no + 4], out[no + 5] = over, rem, reset, retry
      no = no + 4
      if alg < 3 then p = p + 6 else p = p + alg + 4 end
    end
    out[o] = granted
    no = no + 1
    if granted == 1 then
      for j = 1, nt do
        ki = touched[j]
        if wdirty[ki] then
          local ttl = up((wu[ki] - now) / 1000)
          if ttl > 0 then
            ca[ki], cb[ki], cttl[ki], cneed[ki] = wa[ki], wb[ki], ttl + extra, now / 1000 + ttl + extra
          else -- the same as none: deleted
            ca[ki], cb[ki], cttl[ki] = false, 0, 0
          end
        end
      end
    else
      -- Refused: the hits not over answer what their counters have.
      local q = first
      for h = 1, nh do
        local x = o + 1 + (h - 1) * 4
        if out[x] == 0 then
          ki = N[q]
          local _
          _, out[x + 1], out[x + 2], out[x + 3] = step(ca[ki], cb[ki], now, N[q + 1], N[q + 2], N[q + 3], 0, false, N[q + 6], N[q + 7])
        end
        if N[q + 1] < 3 then q = q + 6 else q = q + N[q + 1] + 4 end
      end
    end
  end
end

for i = 1, nk do
  local ttl = cttl[i]
  if ttl then
    if ttl <= 0 then
      if vals[i] then call('DEL', KEYS[i]) end
    elseif vals[i] and cx[i] >= cneed[i] then
      call('SETRANGE', KEYS[i], '0', pack('<dd', ca[i], cb[i]))
    else
      call('SET', KEYS[i], pack('<ddd', ca[i], cb[i], cneed[i] + 3000), 'PX', ttl + 3000)
    end
  end
end

local parts = {}
for i = 1, no, 1000 do
  local k = min(1000, no - i + 1)
  parts[#parts + 1] = pack('<' .. rep('d', k), unpack(out, i, i + k - 1))
end
return concat(parts)
