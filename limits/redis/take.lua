-- Take: one token-bucket decision, mirroring limits.Step (bucket.go).
-- KEYS[1] the bucket (a hash), KEYS[2] the resource's dynamic buckets (a
-- sorted set: member the escaped domain, score its expiry in ms).
-- ARGV: 1 now (decimal ns, or '' for Redis TIME), 2 gen, 3 size, 4 rate
-- (shortest exact decimal), 5 span, 6 tokens, 7 min, 8 max wait, 9 dynamic
-- (0/1), 10 max dynamic (0: unlimited), 11 member, 12 max idle (ns, 0:
-- none), 13 change instant (decimal ns or ''), 14 kind, 15 name.
-- Returns {status (0 decided, 2 too many buckets), granted, wait, retry
-- after, tokens (string), created (0/1)}.
--
-- Instants are decimal strings of Unix ns, split into seconds and
-- nanoseconds so that differences are exact; every quantity below is
-- relative to now and stays below 2^53 (the caller guarantees span and
-- max wait at most 2^52).

local function split(s)
  local neg = false
  if string.sub(s, 1, 1) == '-' then neg = true; s = string.sub(s, 2) end
  local hi = tonumber(string.sub(s, 1, -10)) or 0
  local lo = tonumber(string.sub(s, -9))
  if neg then return -hi, -lo end
  return hi, lo
end

-- rel returns a − b in ns, exact while |a − b| < 2^53; far below, −2^53.
local function rel(ahi, alo, bhi, blo)
  local d = ahi - bhi
  if d < -9000000 then return -9007199254740992 end
  return d * 1e9 + (alo - blo)
end

-- fromrel returns b + v as a decimal string of ns.
local function fromrel(v, bhi, blo)
  local t = blo + v
  local q = math.floor(t / 1e9)
  local r = t - q * 1e9
  while r < 0 do q = q - 1; r = r + 1e9 end
  while r >= 1e9 do q = q + 1; r = r - 1e9 end
  local sec = bhi + q
  if sec < 0 then
    if r > 0 then sec = sec + 1; r = 1e9 - r end
    return string.format('-%d%09d', -sec, r)
  end
  return string.format('%d%09d', sec, r)
end

local function cost(n, rate)
  local x = math.ceil((n * 1e9) / rate)
  if x >= 9223372036854775807 then return 9223372036854775807 end
  return x
end

local function fit(budget, rate, most)
  if budget <= 0 or most <= 0 then return 0, 0 end
  local x = (budget * rate) / 1e9
  local n = most
  if x < most then n = math.floor(x) end
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

local nhi, nlo
if ARGV[1] == '' then
  local t = redis.call('TIME')
  nhi, nlo = tonumber(t[1]), tonumber(t[2]) * 1000
else
  nhi, nlo = split(ARGV[1])
end
local size, rate, span = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local tokens, mn, maxwait = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local dyn, maxdyn = ARGV[9], tonumber(ARGV[10])

local function level(e)
  if e >= 0 then return '0' end
  return string.format('%.17g', math.min(size, ((-e) * rate) / 1e9))
end

local h = redis.call('HMGET', KEYS[1], 'e', 'sz', 'rt', 'sp', 'dy', 'k', 'nm', 'n')
local created = h[1] == false
local relimit = false
local e
if created then
  if dyn == '1' and maxdyn > 0 then
    local nowms = nhi * 1000 + math.floor(nlo / 1e6)
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', nowms)
    if redis.call('ZCARD', KEYS[2]) >= maxdyn then return {2, 0, 0, 0, '0', 0} end
  end
  e = -span
else
  local ehi, elo = split(h[1])
  e = math.max(rel(ehi, elo, nhi, nlo), -span)
  if h[2] ~= ARGV[3] or h[3] ~= ARGV[4] or h[4] ~= ARGV[5] then
    -- limits.Rescale at the instant of the change (or now).
    relimit = true
    local osize, orate, ospan = tonumber(h[2]), tonumber(h[3]), tonumber(h[4])
    local thi, tlo = nhi, nlo
    if ARGV[13] ~= '' then
      thi, tlo = split(ARGV[13])
      if rel(thi, tlo, nhi, nlo) > 0 then thi, tlo = nhi, nlo end
    end
    local et = math.max(rel(ehi, elo, thi, tlo), -ospan)
    local ne
    if et > 0 then
      local debt = (et * orate) / 1e9
      ne = math.ceil((debt * 1e9) / rate)
    else
      local frac = math.min(1, (((-et) * orate) / 1e9) / osize)
      local ns = math.floor(((frac * size) * 1e9) / rate)
      ne = math.max(-math.min(ns, span), -span)
    end
    e = math.max(ne + rel(thi, tlo, nhi, nlo), -span)
  elseif h[5] ~= dyn or h[6] ~= ARGV[14] or h[7] ~= ARGV[15] then
    relimit = true
  end
end

-- limits.Step.
local budget = maxwait - e
local n, c = 0, 0
if mn == tokens then
  c = cost(tokens, rate)
  if c <= budget then n = tokens end
else
  n, c = fit(budget, rate, tokens)
end
if n < mn then
  local retry = -1
  local cm = cost(mn, rate)
  if cm <= span + maxwait then retry = e + cm - maxwait end
  return {0, 0, 0, retry, level(e), 0}
end
e = e + c
local wait = 0
if e > 0 then wait = e end

-- Granted: write the state, the use, the grants (one HSET: the count
-- read above plus one, as HINCRBY would), and the expiry.
local estr, nowstr = fromrel(e, nhi, nlo), nil
if nhi >= 0 and nlo >= 0 then nowstr = string.format('%d%09d', nhi, nlo) else nowstr = fromrel(0, nhi, nlo) end
local grants = (tonumber(h[8]) or 0) + 1
if created or relimit then
  redis.call('HSET', KEYS[1], 'e', estr, 'l', nowstr, 'n', grants, 'g', ARGV[2], 'sz', ARGV[3], 'rt', ARGV[4],
    'sp', ARGV[5], 'dy', dyn, 'k', ARGV[14], 'nm', ARGV[15])
else
  redis.call('HSET', KEYS[1], 'e', estr, 'l', nowstr, 'n', grants)
end
local ttl = math.ceil((math.max(e + span, tonumber(ARGV[12])) + 1e9) / 1e6)
redis.call('PEXPIRE', KEYS[1], ttl)
if dyn == '1' then
  redis.call('ZADD', KEYS[2], nhi * 1000 + math.floor(nlo / 1e6) + ttl, ARGV[11])
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
elseif h[5] == '1' then
  redis.call('ZREM', KEYS[2], ARGV[11])
end
local cr = 0
if created then cr = 1 end
return {0, n, wait, 0, level(e), cr}
