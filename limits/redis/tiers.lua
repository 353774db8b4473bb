-- TakeHits: one decision on a burst-tier domain, mirroring limits.StepTiers
-- (tiers.go) over the domain's TierState and the resource's global HitLog.
-- KEYS[1] the domain (a hash, the same key as a token bucket of the
-- domain), KEYS[2] the resource's dynamic buckets (a sorted set: member
-- the escaped domain, score its expiry in ms), KEYS[3] the resource's
-- global log (a string), KEYS[4] the domain's token bucket (a string: a
-- domain whose resource changed algorithm since); all four under the
-- resource's hash tag.
-- ARGV: 1 the request (int64s: now, now in ms, tokens, min), 2 the
-- parameters (int64s: H, G, unlimited 0/1, Most, n, then per tier L, Tʷ,
-- Tᵃ, Tᶜ, S 0/1), 3 now (decimal ns, or '' for Redis TIME), 4 gen, 5
-- dynamic (0/1), 6 max dynamic (0: unlimited), 7 member, 8 kind, 9 name,
-- 10 the configuration (ARGV[5], ARGV[8], ARGV[9] and ARGV[2] in one
-- string, to notice a change with one field).
-- Returns int64s: status (0 decided, 2 too many buckets), created (0/1),
-- granted, retry after (-1: never), available, tier, tier hits, domain
-- hits last second, global hits last second, burst, hard limited, global
-- limited (0/1 each).
--
-- "int64s" are packed little-endian, 8 bytes each (struct '<I4i4': the low
-- 32 bits unsigned, then the high 32 bits signed). Lua numbers are doubles,
-- so the script keeps every int64 as such a pair (h, l), h·2³² + l with
-- 0 ≤ l < 2³², and computes on pairs exactly: instants (Unix ns), spans,
-- hit counts up to the logs' 2⁶¹ all as Go does, saturating where Go's
-- addSat and subSat do.
--
-- The domain's hash: s (its TierState, int64s: a header, the number of
-- tier runs, the one-second log's base and length, then per run its entry
-- instant, in use 0/1, its window log's base and length; then the logs'
-- entries in that order), l (last use, decimal ns), n (grants), and, set
-- when created or reconfigured, g (generation), dy, k, nm (as a token
-- bucket's) and c (ARGV[10], which holds the parameters for Walk). A
-- hash with n but no s is a token bucket's (Reconfigure's, with an e
-- field): the domain was one, and starts fresh. The
-- global log's string is a header (int64s: head, base) and entries (see
-- the logs below).

local B = 4294967296
local MAXH, MAXL = 2147483647, 4294967295
local MINH = -2147483648

local function add(ah, al, bh, bl)
  local h, l = ah + bh, al + bl
  if l >= B then return h + 1, l - B end
  return h, l
end
local function sub(ah, al, bh, bl)
  local h, l = ah - bh, al - bl
  if l < 0 then return h - 1, l + B end
  return h, l
end
local function sat(h, l)
  if h > MAXH then return MAXH, MAXL end
  if h < MINH then return MINH, 0 end
  return h, l
end
local function addsat(ah, al, bh, bl) return sat(add(ah, al, bh, bl)) end
local function subsat(ah, al, bh, bl) return sat(sub(ah, al, bh, bl)) end
local function lt(ah, al, bh, bl) return ah < bh or (ah == bh and al < bl) end
local function pos(h, l) return h > 0 or (h == 0 and l > 0) end
local function min2(ah, al, bh, bl)
  if lt(bh, bl, ah, al) then return bh, bl end
  return ah, al
end
local function max2(ah, al, bh, bl)
  if lt(ah, al, bh, bl) then return bh, bl end
  return ah, al
end
-- num returns x (an integer, |x| ≤ 2⁵³) as a pair.
local function num(x)
  local h = math.floor(x / B)
  return h, x - h * B
end
-- dbl returns a pair as a double (exact below 2⁵³).
local function dbl(h, l) return h * B + l end

-- Packing: fmt(k) formats k int64s; R, the reply's twelve. Tables are
-- few and built whole (a table grown one entry at a time reallocates as
-- it grows): the parameters and a state's header are unpacked with one
-- struct.unpack each into one table, pair j at [2j − 1] (low) and [2j]
-- (high).
local function fmt(k) return '<' .. string.rep('I4i4', k) end
local P1, P2 = '<I4i4', '<I4i4I4i4'
local R = '<I4i4I4i4I4i4I4i4I4i4I4i4I4i4I4i4I4i4I4i4I4i4I4i4'

-- A log (limits.HitLog) holds n entries in time order, 16 bytes each:
-- the instant, then the cumulative count of hits since the log's origin
-- (an entry's hits are its count minus the previous one's, or minus the
-- base b for the first), so that a window's hits are one binary search
-- away and pruning is one cut. A domain's logs live in the script's
-- memory, read and written with the domain's hash: entries 1 to n of a
-- log are at byte o + 1 of s on, but for the last when e holds it (the
-- one entry a decision may append or change), so that neither reading
-- the state, nor pruning, nor adding hits copies a log (strings are
-- immutable: every cut or concatenation is a copy). The global
-- log, whose size follows the whole resource's traffic, stays in its key
-- and is read and written in place (GETRANGE, SETRANGE, APPEND: O(log n)
-- calls and O(1) bytes a decision, amortized): its string is a header
-- (head, the entries dropped from the front and not yet compacted away;
-- the base) and then the entries, the live ones from head on; c caches
-- the live entries read.
local function newlog() return {s = '', o = 0, e = false, n = 0, bh = 0, bl = 0} end

-- ent returns live entry k's instant and cumulative count.
local function ent(g, k)
  if g.key == nil then
    if g.e and k == g.n then
      local al, ah, cl, ch = struct.unpack(P2, g.e)
      return ah, al, ch, cl
    end
    local al, ah, cl, ch = struct.unpack(P2, g.s, g.o + 16 * k - 15)
    return ah, al, ch, cl
  end
  local e = g.c[k]
  if e == nil then
    local off = 16 * (g.head + k)
    local al, ah, cl, ch = struct.unpack(P2, redis.call('GETRANGE', g.key, off, off + 15))
    e = {ah, al, ch, cl}
    g.c[k] = e
  end
  return e[1], e[2], e[3], e[4]
end
local function atof(g, k)
  local ah, al = ent(g, k)
  return ah, al
end
local function cumof(g, k)
  local _, _, ch, cl = ent(g, k)
  return ch, cl
end
local function before(g, k)
  if k > 1 then return cumof(g, k - 1) end
  return g.bh, g.bl
end
local function total(g)
  if g.n == 0 then return 0, 0 end
  local ch, cl = cumof(g, g.n)
  return sub(ch, cl, g.bh, g.bl)
end
-- first returns the index of the first entry at or after t (n + 1: none).
-- Entries leave from the front and are pruned often, so it looks at the
-- first four (one read for the global log) before it searches.
local function first(g, h, l)
  local n = g.n
  local i = 1
  if g.key ~= nil and n > 0 and g.c[1] == nil then
    local m = math.min(4, n)
    local off = 16 * (g.head + 1)
    local s = redis.call('GETRANGE', g.key, off, off + 16 * m - 1)
    for j = 1, m do
      local al, ah, cl, ch = struct.unpack(P2, s, 16 * j - 15)
      g.c[j] = {ah, al, ch, cl}
    end
  end
  while i <= n and i <= 4 do
    local ah, al = atof(g, i)
    if not lt(ah, al, h, l) then return i end
    i = i + 1
  end
  local j = n + 1
  while i < j do
    local m = math.floor((i + j) / 2)
    local ah, al = atof(g, m)
    if lt(ah, al, h, l) then i = m + 1 else j = m end
  end
  return i
end
-- since returns the hits at or after t.
local function since(g, h, l)
  local i = first(g, h, l)
  if i > g.n then return 0, 0 end
  local ch, cl = cumof(g, g.n)
  return sub(ch, cl, before(g, i))
end
-- header returns the global log's header.
local function header(g) return struct.pack(P2, g.head, 0, g.bl, g.bh) end
-- reset forgets every hit.
local function reset(g)
  g.s, g.o, g.e, g.n, g.bh, g.bl = '', 0, false, 0, 0, 0
  if g.key ~= nil then
    g.head, g.c = 0, {}
    redis.call('SET', g.key, header(g))
  end
end
-- rewrite replaces the global log's string with its live entries (head
-- 0), their counts less d: one read and one write.
local function rewrite(g, dh, dl)
  local live = redis.call('GETRANGE', g.key, 16 * (g.head + 1), -1)
  if dh ~= 0 or dl ~= 0 then
    local parts = {}
    for k = 1, g.n do
      local al, ah, cl, ch = struct.unpack(P2, live, 16 * k - 15)
      ch, cl = sub(ch, cl, dh, dl)
      parts[k] = struct.pack(P2, al, ah, cl, ch)
      g.c[k] = {ah, al, ch, cl}
    end
    live = table.concat(parts)
  end
  g.head = 0
  redis.call('SET', g.key, header(g) .. live)
end
-- addhits records n ≥ 1 hits at t, or at the last entry's instant if t
-- is earlier; the log saturates at 2⁶¹ hits held.
local function addhits(g, th, tl, nh, nl)
  local toth, totl = total(g)
  local rh, rl = sub(536870912, 0, toth, totl)
  nh, nl = min2(nh, nl, rh, rl)
  if not pos(nh, nl) then return end
  if g.n > 0 then
    local ah, al, ch, cl = ent(g, g.n)
    if not lt(ah, al, th, tl) then
      ch, cl = add(ch, cl, nh, nl)
      if g.key == nil then
        g.e = struct.pack(P2, al, ah, cl, ch)
      else
        g.c[g.n] = {ah, al, ch, cl}
        redis.call('SETRANGE', g.key, 16 * (g.head + g.n) + 8, struct.pack(P1, cl, ch))
      end
      return
    end
  end
  local ch, cl = add(g.bh, g.bl, toth, totl)
  ch, cl = add(ch, cl, nh, nl)
  local e = struct.pack(P2, tl, th, cl, ch)
  if lt(1073741824, 0, ch, cl) then
    -- Keep the cumulative counts small (above 2⁶², as limits' HitLog).
    ch, cl = sub(ch, cl, g.bh, g.bl)
    e = struct.pack(P2, tl, th, cl, ch)
    if g.key == nil then
      local parts = {}
      for k = 1, g.n do
        local ah, al, xh, xl = ent(g, k)
        xh, xl = sub(xh, xl, g.bh, g.bl)
        parts[k] = struct.pack(P2, al, ah, xl, xh)
      end
      g.s, g.o, g.e = table.concat(parts), 0, false
    else
      local bh, bl = g.bh, g.bl
      g.bh, g.bl = 0, 0
      rewrite(g, bh, bl)
    end
    g.bh, g.bl = 0, 0
  end
  g.n = g.n + 1
  if g.key == nil then
    if g.e then -- (not in one decision: one addhits a log)
      local m = 16 * (g.n - 2)
      g.s, g.o = string.sub(g.s, g.o + 1, g.o + m) .. g.e, 0
    end
    g.e = e
  else
    g.c[g.n] = {th, tl, ch, cl}
    if g.missing then
      redis.call('SET', g.key, header(g) .. e)
      g.missing = false
    else
      redis.call('APPEND', g.key, e)
    end
  end
end
-- prune forgets the hits before t.
local function prune(g, h, l)
  local i = first(g, h, l)
  if i == 1 then return end
  if i > g.n then
    reset(g)
    return
  end
  g.bh, g.bl = cumof(g, i - 1)
  g.n = g.n - (i - 1)
  if g.key == nil then
    g.o = g.o + 16 * (i - 1)
    return
  end
  local c = {}
  for k, e in pairs(g.c) do
    if k >= i then c[k - i + 1] = e end
  end
  g.c = c
  g.head = g.head + i - 1
  if g.head >= g.n then
    rewrite(g, 0, 0) -- compact: at most as many bytes as were dropped
  else
    redis.call('SETRANGE', g.key, 0, header(g))
  end
end
-- untilatmost returns the earliest t ≥ from at which the hits in
-- [t − w, t] are at most y ≥ 0 if no hit is added: hits only leave.
local function untilatmost(g, fh, fl, wh, wl, yh, yl)
  if g.n == 0 then return fh, fl end
  local i = first(g, subsat(fh, fl, wh, wl))
  if i > g.n then return fh, fl end
  local bh, bl = before(g, i)
  local lh, ll = cumof(g, g.n)
  local xh, xl = sub(lh, ll, bh, bl)
  xh, xl = sub(xh, xl, yh, yl) -- hits that must leave
  if not pos(xh, xl) then return fh, fl end
  local th, tl = add(bh, bl, xh, xl)
  local a, b = i, g.n
  while a < b do
    local m = math.floor((a + b) / 2)
    local ch, cl = cumof(g, m)
    if lt(ch, cl, th, tl) then a = m + 1 else b = m end
  end
  local ah, al = atof(g, a)
  local rh, rl = addsat(ah, al, wh, wl)
  return max2(fh, fl, addsat(rh, rl, 0, 1))
end

-- The request and the parameters.
local rnl, rnh, rml, rmh, tokl, tokh, minl, minh = struct.unpack('<I4i4I4i4I4i4I4i4', ARGV[1])
local nh, nl, nowdec, nowms
if ARGV[3] == '' then
  local t = redis.call('TIME')
  local sec, usec = tonumber(t[1]), tonumber(t[2])
  -- now = sec·10⁹ + usec·10³, exactly: sec = a·2¹⁶ + b.
  local a = math.floor(sec / 65536)
  local x = a * 1e9
  local xh = math.floor(x / 65536)
  nh, nl = add(xh, (x - xh * 65536) * 65536, num((sec - a * 65536) * 1e9 + usec * 1000))
  nowdec = t[1] .. string.sub('00000' .. t[2], -6) .. '000'
  nowms = sec * 1000 + math.floor(usec / 1000)
else
  nh, nl = rnh, rnl
  nowdec = ARGV[3]
  nowms = dbl(rmh, rml)
end

-- The parameters: tier i's L at pair 5i + 1, Tʷ 5i + 2, Tᵃ 5i + 3, Tᶜ
-- 5i + 4, S 5i + 5 (so L's words at [10i + 1] and [10i + 2]).
local P = {struct.unpack(fmt(#ARGV[2] / 8), ARGV[2])}
local Hh, Hl, Gh, Gl = P[2], P[1], P[4], P[3]
local hasH, hasG = pos(Hh, Hl), pos(Gh, Gl)
local unlimited = P[5] == 1
local mosth, mostl = P[8], P[7]
local NT = P[9]

-- The domain.
local hv = redis.call('HMGET', KEYS[1], 's', 'c', 'n')
local wastb = hv[1] == false and hv[3] ~= false
-- No domain: was it a token bucket (KEYS[4], a string)? Its resource
-- changed algorithm since; the domain starts fresh, keeping its grants,
-- and a grant deletes the bucket (Reconfigure is lazy: see store.go).
local fromtb, tbdy = false, nil
if hv[1] == false and hv[3] == false then
  local v = redis.call('GET', KEYS[4])
  if v and #v >= 56 then
    local _, _, _, _, n = struct.unpack('<ddddd', v)
    if n == n then
      wastb, fromtb, hv[3] = true, true, string.format('%d', n)
      tbdy = string.match(string.sub(v, 57), '^%S+ %S+ %S+ (%S+)')
    end
  end
end
local created = hv[1] == false and not wastb
local relimit = wastb
local second = newlog()
local runs = {}
if hv[1] ~= false and not wastb then
  -- The header (the number of runs; the one-second log's base and
  -- length; per run its entry instant, in use, its window's base and
  -- length), then the logs' entries in that order.
  local st = hv[1]
  local nr = struct.unpack('<I4', st)
  local V = {struct.unpack(fmt(3 + 4 * nr), st)}
  local at = 8 * (3 + 4 * nr) + 1
  local function log(k) -- base at pair k, length at k + 1
    local n = V[2 * k + 1]
    local g = {s = st, o = at - 1, e = false, n = n, bh = V[2 * k], bl = V[2 * k - 1]}
    at = at + 16 * n
    return g
  end
  second = log(2)
  for i = 1, nr do
    local k = 4 * i
    runs[i] = {eh = V[2 * k], el = V[2 * k - 1], inuse = V[2 * k + 1] == 1, win = log(k + 2)}
  end
  relimit = hv[2] ~= ARGV[10]
end
local dyn = ARGV[5]
if created and dyn == '1' and ARGV[6] ~= '0' then
  local maxdyn = tonumber(ARGV[6])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', nowms)
  if redis.call('ZCARD', KEYS[2]) >= maxdyn then
    return struct.pack(R, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
  end
end
local glob
if hasG then
  glob = {key = KEYS[3], c = {}, head = 0, n = 0, bh = 0, bl = 0, missing = true}
  local len = redis.call('STRLEN', KEYS[3])
  if len > 0 then
    local hl, _, bl, bh = struct.unpack(P2, redis.call('GETRANGE', KEYS[3], 0, 15))
    glob.head, glob.bh, glob.bl, glob.missing = hl, bh, bl, false
    glob.n = (len - 16) / 16 - hl
  end
end

-- phase returns tier i's phase at t (0 inactive, 1 active, 2 cooldown)
-- and when it ends (MaxInt64 for inactive).
local function phase(i, th, tl)
  local r = runs[i]
  if r == nil or not r.inuse then return 0, MAXH, MAXL end
  local eh, el = addsat(r.eh, r.el, P[10 * i + 6], P[10 * i + 5])
  if lt(th, tl, eh, el) then return 1, eh, el end
  local ch, cl = addsat(eh, el, P[10 * i + 8], P[10 * i + 7])
  if lt(th, tl, ch, cl) then return 2, ch, cl end
  return 0, MAXH, MAXL
end

-- plan evaluates the tiers at t (limits' plan): the current tier cur, the
-- hits in its window k, its room r, what the tiers can take x, the next
-- phase change nx.
local function plan(th, tl)
  local p = {cur = 0, kh = 0, kl = 0, rh = 0, rl = 0, nxh = MAXH, nxl = MAXL}
  for i = NT, 1, -1 do
    local f, uh, ul = phase(i, th, tl)
    if f ~= 0 then p.nxh, p.nxl = min2(p.nxh, p.nxl, uh, ul) end
    if f == 1 and p.cur == 0 then
      p.cur = i
      p.kh, p.kl = since(runs[i].win, subsat(th, tl, P[10 * i + 4], P[10 * i + 3]))
      p.rh, p.rl = max2(0, 0, sub(P[10 * i + 2], P[10 * i + 1], p.kh, p.kl))
    end
  end
  p.xh, p.xl = p.rh, p.rl
  for j = p.cur + 1, NT do
    if phase(j, th, tl) == 2 then
      if P[10 * j + 9] ~= 1 then break end
    else
      p.xh, p.xl = add(p.xh, p.xl, P[10 * j + 2], P[10 * j + 1])
    end
  end
  return p
end

-- retryafter returns t − now (≥ 1), or −1 (never) when it overflows.
local function retryafter(th, tl)
  local dh, dl = subsat(th, tl, nh, nl)
  if dh == MAXH and dl == MAXL then return -1, MAXL end
  return max2(dh, dl, 0, 1)
end

-- retry returns when a request of at least m hits would be granted if no
-- hit came meanwhile (limits' retry).
local function retry(mh, ml)
  if lt(mosth, mostl, mh, ml) then return -1, MAXL end
  local th, tl = nh, nl
  if hasH then th, tl = max2(th, tl, untilatmost(second, nh, nl, 0, 1e9, sub(Hh, Hl, mh, ml))) end
  if hasG then th, tl = max2(th, tl, untilatmost(glob, nh, nl, 0, 1e9, sub(Gh, Gl, mh, ml))) end
  for _ = 1, 2 * NT + 2 do
    local p = plan(th, tl)
    if not lt(p.xh, p.xl, mh, ml) then return retryafter(th, tl) end
    local c = p.cur
    if c > 0 then
      local pathh, pathl = sub(p.xh, p.xl, p.rh, p.rl)
      local needh, needl = sub(mh, ml, pathh, pathl)
      if not lt(P[10 * c + 2], P[10 * c + 1], needh, needl) then
        local yh, yl = sub(P[10 * c + 2], P[10 * c + 1], needh, needl)
        local t2h, t2l = untilatmost(runs[c].win, th, tl, P[10 * c + 4], P[10 * c + 3], yh, yl)
        if lt(t2h, t2l, p.nxh, p.nxl) then return retryafter(t2h, t2l) end
      end
    end
    if p.nxh == MAXH and p.nxl == MAXL then break end
    th, tl = p.nxh, p.nxl
  end
  return -1, MAXL
end

-- limits.StepTiers.
local fromh, froml = subsat(nh, nl, 0, 1e9)
local domh, doml = since(second, fromh, froml)
local globh, globl = 0, 0
if hasG then globh, globl = since(glob, fromh, froml) end
local pln = plan(nh, nl)
local avh, avl = pln.xh, pln.xl
local hardlim, globlim = 0, 0
if hasH then
  local ah, al = max2(0, 0, sub(Hh, Hl, domh, doml))
  if lt(ah, al, tokh, tokl) then hardlim = 1 end
  avh, avl = min2(avh, avl, ah, al)
end
if hasG then
  local ah, al = max2(0, 0, sub(Gh, Gl, globh, globl))
  if lt(ah, al, tokh, tokl) then globlim = 1 end
  avh, avl = min2(avh, avl, ah, al)
end
local gh, gl = min2(tokh, tokl, avh, avl)
if unlimited then
  gh, gl = tokh, tokl
elseif lt(gh, gl, minh, minl) then
  local wh, wl = retry(minh, minl)
  return struct.pack(R, 0, 0, 0, 0, 0, 0, wl, wh, avl, avh, pln.cur, 0, pln.kl, pln.kh, doml, domh,
    globl, globh, 0, 0, hardlim, 0, globlim, 0)
end

-- Grant: forget what no window holds any more, then place the hits.
for i = #runs, NT + 1, -1 do runs[i] = nil end
for i = #runs + 1, NT do runs[i] = {eh = 0, el = 0, inuse = false, win = newlog()} end
for i = 1, NT do
  local r = runs[i]
  local f = phase(i, nh, nl)
  if f == 1 then
    prune(r.win, subsat(nh, nl, P[10 * i + 4], P[10 * i + 3]))
  elseif f == 2 then
    reset(r.win)
  else
    r.inuse = false
    reset(r.win)
  end
end
local lefth, leftl = min2(gh, gl, pln.xh, pln.xl)
local placedh, placedl = lefth, leftl
local cur, burst = pln.cur, 0
if cur > 0 and pos(pln.rh, pln.rl) and pos(lefth, leftl) then
  local xh, xl = min2(lefth, leftl, pln.rh, pln.rl)
  addhits(runs[cur].win, nh, nl, xh, xl)
  lefth, leftl = sub(lefth, leftl, xh, xl)
end
for j = pln.cur + 1, NT do
  if not pos(lefth, leftl) then break end
  if phase(j, nh, nl) == 2 then
    if P[10 * j + 9] ~= 1 then break end
  else
    local r = runs[j]
    local xh, xl = min2(lefth, leftl, P[10 * j + 2], P[10 * j + 1])
    r.inuse, r.eh, r.el = true, nh, nl
    reset(r.win)
    addhits(r.win, nh, nl, xh, xl)
    lefth, leftl = sub(lefth, leftl, xh, xl)
    cur, burst = j, 1
  end
end
prune(second, fromh, froml)
addhits(second, nh, nl, gh, gl)
if hasG then
  prune(glob, fromh, froml)
  addhits(glob, nh, nl, gh, gl)
  globh, globl = total(glob)
end
local thh, thl = 0, 0
if cur > 0 then thh, thl = total(runs[cur].win) end
domh, doml = total(second)
avh, avl = sub(pln.xh, pln.xl, placedh, placedl)
if hasH then avh, avl = min2(avh, avl, sub(Hh, Hl, domh, doml)) end
if hasG then avh, avl = min2(avh, avl, sub(Gh, Gl, globh, globl)) end
avh, avl = max2(0, 0, avh, avl)

-- Write the state, the use and the expiry: the domain's key lives until
-- the domain would be fresh again (no tier active or in cooldown, no hit
-- in the last second), the global log's until it has no hit in the last
-- second, plus a second each (as a token bucket's).
local lh, ll = atof(second, second.n)
local fh, fl = addsat(lh, ll, 0, 1e9 + 1)
local hdr = struct.pack('<I4i4I4i4I4i4', NT, 0, second.bl, second.bh, second.n, 0)
for i = 1, NT do
  local r = runs[i]
  local u = 0
  if r.inuse then
    u = 1
    local eh, el = addsat(r.eh, r.el, P[10 * i + 6], P[10 * i + 5])
    fh, fl = max2(fh, fl, addsat(eh, el, P[10 * i + 8], P[10 * i + 7]))
  end
  hdr = hdr .. struct.pack('<I4i4I4i4I4i4I4i4', r.el, r.eh, u, 0, r.win.bl, r.win.bh, r.win.n, 0)
end
-- The logs: the live part of each one's s, and its e.
local parts, np = {hdr}, 1
local function pieces(g)
  local m = g.n
  if g.e then m = m - 1 end
  if m > 0 then
    np = np + 1
    parts[np] = string.sub(g.s, g.o + 1, g.o + 16 * m)
  end
  if g.e then
    np = np + 1
    parts[np] = g.e
  end
end
pieces(second)
for i = 1, NT do pieces(runs[i].win) end
local state = table.concat(parts)
local grants = (tonumber(hv[3]) or 0) + 1
local ttl = math.ceil(dbl(sub(fh, fl, nh, nl)) / 1e6) + 1000
-- (A domain that is no longer dynamic leaves the set.)
local wasdyn = relimit and dyn ~= '1' and (fromtb and tbdy or redis.call('HGET', KEYS[1], 'dy')) == '1'
if fromtb then redis.call('DEL', KEYS[4]) end
if created or relimit then
  if wastb then redis.call('HDEL', KEYS[1], 'e', 'sz', 'rt', 'sp') end
  redis.call('HSET', KEYS[1], 's', state, 'l', nowdec, 'n', grants, 'g', ARGV[4], 'dy', dyn, 'k', ARGV[8], 'nm', ARGV[9], 'c', ARGV[10])
else
  redis.call('HSET', KEYS[1], 's', state, 'l', nowdec, 'n', grants)
end
redis.call('PEXPIRE', KEYS[1], ttl)
if dyn == '1' then
  redis.call('ZADD', KEYS[2], nowms + ttl, ARGV[7])
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
elseif wasdyn then
  redis.call('ZREM', KEYS[2], ARGV[7])
end
if hasG then
  local gh2, gl2 = atof(glob, glob.n)
  gh2, gl2 = addsat(gh2, gl2, 0, 1e9 + 1)
  redis.call('PEXPIRE', KEYS[3], math.ceil(dbl(sub(gh2, gl2, nh, nl)) / 1e6) + 1000)
end

local crt = 0
if created then crt = 1 end
return struct.pack(R, 0, 0, crt, 0, gl, gh, 0, 0, avl, avh, cur, 0, thl, thh, doml, domh, globl, globh,
  burst, 0, hardlim, 0, globlim, 0)
