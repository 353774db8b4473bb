-- Learn: the learning period of one resource (copies.Log.Learn).
-- KEYS: 1 this server's fence in the resource's slot, 2 the resource's
-- record, 3 its learning marker (the set of the epochs it waits for), 4
-- the set of count keys this server contributes to.
-- ARGV: 1 this server's epoch, 2 holding (0/1: this server holds copies
-- of the resource), 3 the learning period in ms, 4 the fleet's members
-- known (0/1), 5.. the epochs of the fleet's other live members.
-- A record found gone is made again, and the learning period starts: the
-- marker holds every other live member's epoch, and this server's if it
-- holds copies (each member's restore, or its own learn once it holds
-- none, removes its epoch), or '?' when the members are not known (no
-- member removes it: the period runs out). Otherwise this server's holds
-- are written back — unless it holds copies and its set of count keys is
-- gone (Redis lost them: its restore comes first) — and its epoch leaves
-- the marker. An emptied set is deleted by Redis: the period is over.
-- Returns {-1} when fenced, else {ms left of the period (0: none),
-- servers it waits for}.
if redis.call('EXISTS', KEYS[1]) == 1 then return {-1} end
local epoch, holding = ARGV[1], ARGV[2] == '1'
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], '1')
  redis.call('DEL', KEYS[3])
  local wait = {}
  if ARGV[4] ~= '1' then
    wait[#wait + 1] = '?'
  else
    for i = 5, #ARGV do
      if ARGV[i] ~= epoch then wait[#wait + 1] = ARGV[i] end
    end
  end
  if holding then wait[#wait + 1] = epoch end
  if #wait > 0 and tonumber(ARGV[3]) > 0 then
    redis.call('SADD', KEYS[3], unpack(wait))
    redis.call('PEXPIRE', KEYS[3], ARGV[3])
  end
elseif (not holding or redis.call('EXISTS', KEYS[4]) == 1) and redis.call('TYPE', KEYS[3]).ok == 'set' then
  redis.call('SREM', KEYS[3], epoch)
end
local left = redis.call('PTTL', KEYS[3])
if left < 0 then return {0, 0} end
local waiting = 0
if redis.call('TYPE', KEYS[3]).ok == 'set' then waiting = redis.call('SCARD', KEYS[3]) end
return {left, waiting}
