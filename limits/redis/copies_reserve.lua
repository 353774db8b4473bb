-- Reserve on a copy-limited resource: copies.Engine.Reserve's decision over
-- every server's contributions (copies.Log.Reserve).
-- KEYS: 1 this server's fence in the resource's slot, 2 the set of count
-- keys this server contributes to, 3 the resource's record, 4 its learning
-- marker, 5 the global count, 6 the domain's count, 7.. the groups'
-- counts. Counts are hashes: field '_' the total, one field per
-- contributor ('s' server epoch, 't' staged transfer).
-- ARGV: 1 this server's field, 2 copies, 3 min, 4 domain limit, 5 global
-- limit (0: none), 6 ignore (0/1), 7 MaxCopies, 8.. the groups' limits.
-- Returns {-1} when fenced; {-3} when the record is gone (Redis lost the
-- counts, or never had them: copies_learn.lua makes it again and starts
-- the learning period, then the reserve is tried again); {-2, ms left,
-- servers waited for} while learning (the servers are writing their holds
-- back; the marker is the set of epochs still to do so, or, from a server
-- before 2026-11-28, a string); else {granted, domain holds, global
-- holds, group holds...} after the decision (granted 0: nothing written).
-- A reserve that ignores the limits does not wait for the learning period
-- (it has no limit to protect), nor for the record.
if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
local ignore = ARGV[6] == '1'
if not ignore then
  if redis.call('EXISTS', KEYS[3]) == 0 then return {-3} end
  local learning = redis.call('PTTL', KEYS[4])
  if learning > 0 then
    local waiting = 0
    if redis.call('TYPE', KEYS[4]).ok == 'set' then waiting = redis.call('SCARD', KEYS[4]) end
    return {-2, learning, waiting}
  end
end
local f = ARGV[1]
local copies, mn, dl, gl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local mx = tonumber(ARGV[7])
local function total(k) return tonumber(redis.call('HGET', k, '_') or '0') end
local gh, dh = total(KEYS[5]), total(KEYS[6])
local free = math.min(mx - dh, mx - gh)
if not ignore then
  free = math.min(free, dl - dh)
  if gl > 0 then free = math.min(free, gl - gh) end
end
local groups = {}
for i = 7, #KEYS do
  local h = total(KEYS[i])
  groups[#groups + 1] = h
  free = math.min(free, mx - h)
  if not ignore then free = math.min(free, tonumber(ARGV[i + 1]) - h) end
end
local n = math.min(copies, free)
if n < mn then n = 0 end
if n > 0 then
  for i = 5, #KEYS do
    redis.call('HINCRBY', KEYS[i], '_', n)
    redis.call('HINCRBY', KEYS[i], f, n)
    redis.call('SADD', KEYS[2], KEYS[i])
  end
end
local out = {n, dh + n, gh + n}
for _, h in ipairs(groups) do out[#out + 1] = h + n end
return out
