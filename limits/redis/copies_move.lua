-- Move copies between two contributors of the same counts: release (to
-- nobody), stage (server to transfer), seize (transfer to server), expire
-- (transfer to nobody), cleanup (a dead server to nobody).
-- Every key is in the resource's slot (Redis Cluster): a key a mode does
-- not use is passed as any other key of the slot and left alone.
-- KEYS: 1 the acting server's fence, 2 the source's set of count keys, 3
-- the destination's set of count keys, 4 the transfer's hash, 5.. the
-- count keys.
-- ARGV: 1 source field, 2 destination field ('' to drop the copies),
-- 3 copies (0: all the source has in each count), 4 mode, 5 keep KEYS[2]
-- (0/1), 6 keep KEYS[3] (0/1), 7 ttl ms, 8 domain, 9 groups, 10 session.
-- Modes:
--   'release' subtract at most copies from each count;
--   'stage'   the source must hold copies in every count; creates the
--             transfer hash (ttl, domain, groups, staging session);
--   'seize'   the transfer must exist, hold copies, be unexpired; deleted;
--   'expire'  the transfer must exist, hold copies, be expired; deleted;
--   'fence'   sets the fence KEYS[1] (for ttl) and moves all.
-- Returns: {1, deadline ms (stage)} done; {-1} fenced; {0, why} refused
-- (why: 'lost' missing contributions, 'gone' no such transfer, 'early'
-- not expired yet with its deadline as third value, 'late' expired).
local mode = ARGV[4]
if mode == 'fence' then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[7])
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  return {-1}
end
local src, dst, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local srcset, dstset = ARGV[5] == '1', ARGV[6] == '1'
local function nowms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local deadline = 0
if mode == 'stage' then
  for i = 5, #KEYS do
    if tonumber(redis.call('HGET', KEYS[i], src) or '0') < n then return {0, 'lost'} end
  end
  deadline = nowms() + tonumber(ARGV[7])
  redis.call('HSET', KEYS[4], 'n', n, 'dl', deadline, 'd', ARGV[8], 'g', ARGV[9], 's', ARGV[10])
elseif mode == 'seize' or mode == 'expire' then
  local t = redis.call('HMGET', KEYS[4], 'n', 'dl')
  if not t[1] or tonumber(t[1]) ~= n then return {0, 'gone'} end
  local expired = nowms() >= tonumber(t[2])
  if mode == 'seize' and expired then return {0, 'late'} end
  if mode == 'expire' and not expired then return {0, 'early', tonumber(t[2])} end
  redis.call('DEL', KEYS[4])
end
for i = 5, #KEYS do
  local k = KEYS[i]
  local have = tonumber(redis.call('HGET', k, src) or '0')
  local x = have
  if n > 0 then x = math.min(have, n) end
  if x > 0 then
    if x == have then
      redis.call('HDEL', k, src)
      if srcset then redis.call('SREM', KEYS[2], k) end
    else
      redis.call('HINCRBY', k, src, -x)
    end
    if dst ~= '' then
      redis.call('HINCRBY', k, dst, x)
      if dstset then redis.call('SADD', KEYS[3], k) end
    elseif redis.call('HINCRBY', k, '_', -x) <= 0 then
      redis.call('DEL', k)
    end
  end
end
return {1, deadline}
