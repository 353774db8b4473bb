-- Take: token-bucket decisions, mirroring limits.Step (bucket.go), for
-- one or more requests on the buckets of one resource (one slot), decided
-- in order, each exactly as it would be alone in a script of its own.
-- KEYS[1] the resource's dynamic buckets (a sorted set: member the
-- escaped domain, score its expiry in ms); KEYS[2..] the buckets, each
-- once, each ending in the escaped domain from the byte ARGV[1] gives on. A bucket
-- is a string: seven little-endian doubles, each an integer (the instant
-- the bucket is empty and its last use, each as seconds and nanoseconds;
-- its grants; the generation that wrote it; x, the instant in ms until
-- which its key lives), then the configuration it was granted under,
-- "size rate span dynamic kind name".
-- ARGV[1] the numbers, little-endian doubles: the number of limits L,
-- the number of asks A, where the domain starts in a bucket key; then L
-- limits of 9: gen, size, rate, span, max dynamic (0: unlimited), max
-- idle (ns, 0: none), and the instant of the change to gen (1 and its
-- seconds and ns, or 0 0 0); then A asks of 8: limit (1 to L), tokens,
-- min, max wait, dynamic (0/1), and now (1 and its seconds and ns, or
-- 0 0 0 for Redis TIME, read once). Then ARGV[2 .. 2L + 1], each limit's
-- configuration as a bucket stores it, static and dynamic; and last the
-- requests, one string of 4 bytes each: bucket (its index in KEYS) and
-- ask (1 to A), each a big-endian uint16.
-- Returns one string: 4 little-endian doubles per request, in order,
-- each an integer: code (0 granted, 1 granted to a bucket it created, 2
-- rejected, 3 too many buckets), granted, then the wait (ns) of a grant
-- or the retry after (ns, −1: never) of a rejection, and fill (ns: the
-- tokens left are min(size, fill × rate ÷ 1e9), limits.Level's
-- arithmetic, done by the caller).
--
-- Instants come as Unix ns split into seconds and nanoseconds (and are
-- stored so) so that differences are exact; every
-- quantity below is relative to now and stays below 2^53 (the caller
-- guarantees span and max wait at most 2^52).
--
-- A grant needs the bucket's key to live until the bucket is full again
-- (or MaxIdle, when longer), plus one second. When x is earlier, the
-- write sets the key's TTL to three seconds past that (PEXPIRE, and x
-- with it); otherwise it keeps the TTL: a key expires one to four seconds
-- after its bucket is full, and a bucket used at any rate has its TTL
-- set at most once in three seconds (PEXPIRE is the dearest command
-- here, about as dear as a bucket's read and write together).
--
-- The buckets are read at once (MGET: one Redis call, not one a bucket)
-- and each is written once, after the last request
-- (its numbers in place, SETRANGE; or, new or reconfigured, the whole
-- string, SET): the writes of the requests before are never seen by
-- anyone but the requests after, which see them here as they would in
-- Redis. The dynamic set's changes are applied before any
-- request counts it, and at the end. Redis calls and Lua's conversions
-- between numbers and strings are this script's main costs: each is done
-- once where it can be, and numbers travel packed (struct), not as text.

-- Globals read once (a global is a table lookup; these run per request).
local ARGV, KEYS, tonumber, pairs, next, unpack = ARGV, KEYS, tonumber, pairs, next, unpack
local call, floor, ceil, max, min = redis.call, math.floor, math.ceil, math.max, math.min
local sub, format, match, rep, byte, find = string.sub, string.format, string.match, string.rep, string.byte, string.find
local pack, unpackd = struct.pack, struct.unpack

-- rel returns a − b in ns, exact while |a − b| < 2^53; far below, −2^53.
local function rel(ahi, alo, bhi, blo)
  local d = ahi - bhi
  if d < -9000000 then return -9007199254740992 end
  return d * 1e9 + (alo - blo)
end

-- at returns b + v split as the caller splits an instant: seconds and
-- nanoseconds, both truncated toward zero.
local function at(v, bhi, blo)
  local t = blo + v
  local q = floor(t / 1e9)
  local r = t - q * 1e9
  while r < 0 do q = q - 1; r = r + 1e9 end
  while r >= 1e9 do q = q + 1; r = r - 1e9 end
  local sec = bhi + q
  if sec < 0 then
    if r > 0 then sec = sec + 1; r = 1e9 - r end
    return sec, -r
  end
  return sec, r
end

local function cost(n, rate)
  local x = ceil((n * 1e9) / rate)
  if x >= 9223372036854775807 then return 9223372036854775807 end
  return x
end

local function fit(budget, rate, most)
  if budget <= 0 or most <= 0 then return 0, 0 end
  local x = (budget * rate) / 1e9
  local n = most
  if x < most then n = floor(x) end
  local c = cost(n, rate)
  while n > 0 and c > budget do
    n = n - 1
    c = cost(n, rate)
  end
  while n < most do
    local c2 = cost(n + 1, rate)
    if c2 > budget then break end
    n, c = n + 1, c2
  end
  return n, c
end

-- The limits, each with its configuration as a bucket stores it (cf,
-- by dynamic flag). The numbers are read with one unpack a limit or ask,
-- not one tonumber a number (each about as dear as the unpack).
local nums = ARGV[1]
local nl, na, mstart, pos = unpackd('<ddd', nums)
local limits = {}
for j = 1, nl do
  local l = {g = 0, size = 0, rate = 0, span = 0, maxdyn = 0, idle = 0, hasat = 0, athi = 0, atlo = 0,
    cf = {['0'] = ARGV[2 * j], ['1'] = ARGV[2 * j + 1]}, sz = false, rt = false, sp = false}
  l.g, l.size, l.rate, l.span, l.maxdyn, l.idle, l.hasat, l.athi, l.atlo, pos = unpackd('<ddddddddd', nums, pos)
  limits[j] = l
end

-- decimals returns l's size, rate and span as its configuration writes
-- them (to compare with a stored configuration's).
local function decimals(l)
  if not l.sz then l.sz, l.rt, l.sp = match(l.cf['0'], '^(%S+) (%S+) (%S+)') end
  return l.sz, l.rt, l.sp
end

-- Redis TIME, read once.
local thi, tlo
local function redisnow()
  if not thi then
    local t = call('TIME')
    thi, tlo = tonumber(t[1]), tonumber(t[2]) * 1000
  end
  return thi, tlo
end

-- The buckets as stored (as they would be after the requests so far),
-- each a row: an array, not a record, made by one constructor, for speed
-- (a row is made per bucket and call; the garbage collector's work grows
-- with the bytes made, and an array of 13 is a quarter of a record's
-- size; a constructor fills it in one step, not one store a field):
--   [1] the configuration (false: not read yet; see stored),
--   [2] the dynamic flag it was last granted under,
--   [3] granted (to be written), [4] written whole (new or
--   reconfigured), [5] the TTL to set (ms) if x moved (else false),
--   [6] the string as read, then the stored numbers:
--   [7], [8] e, the instant the bucket is empty (at's parts; false for a
--     bucket Redis does not have), [9], [10] its last use, [11] grants,
--   [12] the generation, [13] x, the key's expiry (ms), [14] for a
--   bucket Redis does not have, the burst-tier domain it was (its key,
--   deleted by a grant; false: none; nil: not looked for yet).
local rows = {}
local vals -- the strings of KEYS[2..], vals[i - 1] for KEYS[i]
do
  local nk = #KEYS
  if nk <= 1001 then
    vals = call('MGET', unpack(KEYS, 2))
  else
    vals = {}
    for i = 2, nk, 1000 do -- unpack's stack has room for about 8000
      local got = call('MGET', unpack(KEYS, i, min(i + 999, nk)))
      for j = 1, #got do vals[i + j - 2] = got[j] end
    end
  end
end
local function row(i)
  local r = rows[i]
  if r then return r end
  local v = vals[i - 1]
  if v and #v >= 56 then
    local ehi, elo, lhi, llo, n, g, x = unpackd('<ddddddd', v)
    r = {false, false, false, false, false, v, ehi, elo, lhi, llo, n, g, x}
    if r[7] ~= r[7] or r[8] ~= r[8] or r[13] ~= r[13] or r[11] ~= r[11] then
      -- Not numbers (NaN: not a bucket's): as if absent, written whole.
      r[7], r[11], r[13] = false, 0, false
    end
  else
    r = {false, false, false, false, false, false, false, false, false, false, 0, false, false}
  end
  rows[i] = r
  return r
end

-- stored returns the configuration row r was written under, cf itself
-- when the same (found in place: no new string is made, the common case),
-- and keeps it in r[1]; its callers read r[1] first.
local function stored(r, cf)
  local v, s = r[6], nil
  if #v == 56 + #cf and find(v, cf, 57, true) == 57 then s = cf else s = sub(v, 57) end
  r[1] = s
  return s
end

-- The dynamic set's changes not applied yet: member → score (ZADD) or
-- false (ZREM); the largest ttl ZADDed (the set's PEXPIRE, if longer).
-- They go as one ZREM and one ZADD.
local zset, zttl = {}, nil
local function flushset()
  if next(zset) == nil then return end
  local rem, add = {}, {}
  for m, score in pairs(zset) do
    if score then
      add[#add + 1] = score
      add[#add + 1] = m
    else
      rem[#rem + 1] = m
    end
  end
  if #rem > 0 then call('ZREM', KEYS[1], unpack(rem)) end
  if #add > 0 then
    call('ZADD', KEYS[1], unpack(add))
    if call('PTTL', KEYS[1]) < zttl then call('PEXPIRE', KEYS[1], zttl) end
  end
  zset, zttl = {}, nil
end

-- take decides request ask on the bucket KEYS[ki] and appends its four
-- values to out, out[n0 - 3] to out[n0].
local out, n0 = {}, 0
local function take(ki, ask)
  local r = row(ki)
  local l = ask.l
  local tokens, mn, maxwait, dyn = ask.tokens, ask.mn, ask.maxwait, ask.dyn
  local size, rate, span = l.size, l.rate, l.span
  local nhi, nlo = ask.nhi, ask.nlo
  n0 = n0 + 4

  local fresh = not r[7]
  if fresh and r[14] == nil then
    -- No bucket: was the domain a burst-tier domain (a hash under the
    -- same name but "b:")? Its resource changed algorithm since; the
    -- bucket starts full, keeping its grants, and a grant deletes the
    -- hash (Reconfigure is lazy: see store.go).
    r[14] = false
    local bk = sub(KEYS[ki], 1, mstart - 3) .. 'b:' .. sub(KEYS[ki], mstart)
    local h = call('HMGET', bk, 'n', 's', 'dy')
    if h[2] then r[14], r[11], r[2] = bk, tonumber(h[1]) or 0, h[3] end
  end
  local created = fresh and not r[14]
  local relimit = false
  local e
  if fresh then
    if created and dyn == '1' and l.maxdyn > 0 then
      flushset()
      call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ask.nowms)
      if call('ZCARD', KEYS[1]) >= l.maxdyn then
        out[n0 - 3], out[n0 - 2], out[n0 - 1], out[n0] = 3, 0, 0, 0
        return
      end
    end
    e = -span
  else
    local ehi, elo = r[7], r[8]
    -- max(rel(ehi, elo, nhi, nlo), −span), inlined (this runs per request).
    local d = ehi - nhi
    if d < -9000000 then e = -span else e = d * 1e9 + (elo - nlo) end
    if e < -span then e = -span end
    local cf = l.cf[dyn]
    local osz, ort, osp
    local rcf = r[1] or stored(r, cf)
    if rcf == cf then
      if r[2] ~= dyn then r[2] = dyn end
    else
      -- Another configuration (or dynamic flag): rewritten on a grant.
      osz, ort, osp, r[2] = match(rcf, '^(%S+) (%S+) (%S+) (%S+)')
      relimit = true
      if not osz then -- unreadable: full, and a new TTL
        e, r[13] = -span, false
        osz, ort, osp = decimals(l)
      end
    end
    local lsz, lrt, lsp
    if relimit then lsz, lrt, lsp = decimals(l) end
    if relimit and (osz ~= lsz or ort ~= lrt or osp ~= lsp) then
      -- limits.Rescale at the instant of the change (or now).
      local osize, orate, ospan = tonumber(osz), tonumber(ort), tonumber(osp)
      local chi, clo = nhi, nlo
      if l.hasat == 1 then
        chi, clo = l.athi, l.atlo
        if rel(chi, clo, nhi, nlo) > 0 then chi, clo = nhi, nlo end
      end
      local et = max(rel(ehi, elo, chi, clo), -ospan)
      local ne
      if et > 0 then
        local debt = (et * orate) / 1e9
        ne = ceil((debt * 1e9) / rate)
      else
        local frac = min(1, (((-et) * orate) / 1e9) / osize)
        local ns = floor(((frac * size) * 1e9) / rate)
        ne = max(-min(ns, span), -span)
      end
      e = max(ne + rel(chi, clo, nhi, nlo), -span)
    end
  end

  -- limits.Step.
  local budget = maxwait - e
  local n, c = 0, 0
  if mn == tokens then
    c = ask.c
    if c <= budget then n = tokens end
  else
    n, c = fit(budget, rate, tokens)
  end
  if n < mn then
    local retry = -1
    local cm = ask.cm
    if cm <= span + maxwait then retry = e + cm - maxwait end
    local f = 0
    if e < 0 then f = -e end
    out[n0 - 3], out[n0 - 2], out[n0 - 1], out[n0] = 2, 0, retry, f
    return
  end
  e = e + c
  local wait = 0
  if e > 0 then wait = e end

  -- Granted: the state, the use, the grants, the configuration on
  -- creation or reconfiguration, and the expiry; written at the end.
  local olddy = r[2]
  r[7], r[8] = at(e, nhi, nlo)
  r[9], r[10] = nhi, nlo
  r[11] = r[11] + 1
  if fresh or relimit then
    r[4] = true
    r[12], r[1] = l.g, l.cf[dyn]
  end
  if not r[3] then r[3] = true end
  local nowms = ask.nowms
  -- The key must live until need = nowms + ⌈(hold + 1 s) ÷ 1 ms⌉; as x
  -- − nowms is whole, need > x exactly when (hold + 1 s) ÷ 1 ms > x −
  -- nowms, tested without the ceiling.
  local hold = e + span
  if l.idle > hold then hold = l.idle end
  local x = r[13]
  if not x or (hold + 1e9) / 1e6 > x - nowms then
    r[13] = nowms + ceil((hold + 1e9) / 1e6) + 3000
    r[5] = r[13] - nowms
  end
  if dyn == '1' then
    zset[sub(KEYS[ki], mstart)] = r[13]
    if not zttl or r[13] - nowms > zttl then zttl = r[13] - nowms end
  elseif olddy == '1' then
    zset[sub(KEYS[ki], mstart)] = false
  end
  local code, f = 0, 0
  if created then code = 1 end
  if e < 0 then f = -e end
  out[n0 - 3], out[n0 - 2], out[n0 - 1], out[n0] = code, n, wait, f
end

-- The asks, then the requests.
local asks = {}
local dynflag = {[0] = '0', [1] = '1'}
for j = 1, na do
  local a = {l = false, tokens = 0, mn = 0, maxwait = 0, dyn = 0, nhi = 0, nlo = 0, nowms = 0, c = 0, cm = 0}
  local li, dyn, hasnow
  li, a.tokens, a.mn, a.maxwait, dyn, hasnow, a.nhi, a.nlo, pos = unpackd('<dddddddd', nums, pos)
  a.l, a.dyn = limits[li], dynflag[dyn]
  if hasnow == 0 then a.nhi, a.nlo = redisnow() end
  a.nowms = a.nhi * 1000 + floor(a.nlo / 1e6)
  a.c, a.cm = cost(a.tokens, a.l.rate), cost(a.mn, a.l.rate) -- what tokens and min cost (ns)
  asks[j] = a
end
local rq = ARGV[2 * nl + 2]
for p = 1, #rq, 4 do
  local k1, k2, a1, a2 = byte(rq, p, p + 3)
  take(k1 * 256 + k2, asks[a1 * 256 + a2])
end

-- The writes: a new or reconfigured bucket is SET whole; another one has
-- its numbers overwritten in place (SETRANGE, which keeps the TTL), and
-- its TTL set only if x moved.
for i, r in pairs(rows) do
  if r[3] then
    if r[4] then
      local h = pack('<ddddddd', r[7], r[8], r[9], r[10], r[11], r[12], r[13])
      if r[5] then
        call('SET', KEYS[i], h .. r[1], 'PX', format('%d', r[5]))
      else
        call('SET', KEYS[i], h .. r[1], 'KEEPTTL')
      end
    elseif r[5] then
      call('SETRANGE', KEYS[i], '0', pack('<ddddddd', r[7], r[8], r[9], r[10], r[11], r[12], r[13]))
      call('PEXPIRE', KEYS[i], format('%d', r[5]))
    else -- the generation and x unchanged: the first five numbers
      call('SETRANGE', KEYS[i], '0', pack('<ddddd', r[7], r[8], r[9], r[10], r[11]))
    end
    if r[14] then call('DEL', r[14]) end
  end
end
flushset()
-- The answer, packed 4000 numbers at a time (unpack's stack has room for
-- about 8000).
if n0 <= 4000 then return pack('<' .. rep('d', n0), unpack(out, 1, n0)) end
local parts = {}
for i = 1, n0, 4000 do
  local j = min(i + 3999, n0)
  parts[#parts + 1] = pack('<' .. rep('d', j - i + 1), unpack(out, i, j))
end
return table.concat(parts)
