-- Restore: set this server's contributions to the given counts, whatever
-- they were (copies.Log.Restore).
-- KEYS: 1 this server's fence, 2 its set of count keys, 3 the resource's
-- record, 4 its learning marker, 5.. count keys.
-- ARGV: 1 this server's field, 2 its epoch, 3.. the contribution wanted
-- in each count key, index for index (0: none).
-- A record found gone is made again by copies_learn.lua first, which
-- starts the learning period: the other servers' contributions are gone
-- too, and they have not written theirs back yet. Once this server's
-- are written, the learning period no longer waits for it.
-- Returns -1 when fenced, -3 when the record is gone, else 1.
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if redis.call('EXISTS', KEYS[3]) == 0 then return -3 end
local f = ARGV[1]
for i = 5, #KEYS do
  local k, want = KEYS[i], tonumber(ARGV[i - 2])
  local have = tonumber(redis.call('HGET', k, f) or '0')
  if want ~= have then
    if want == 0 then
      redis.call('HDEL', k, f)
      redis.call('SREM', KEYS[2], k)
    else
      redis.call('HSET', k, f, want)
      redis.call('SADD', KEYS[2], k)
    end
    if redis.call('HINCRBY', k, '_', want - have) <= 0 then redis.call('DEL', k) end
  end
end
if redis.call('TYPE', KEYS[4]).ok == 'set' then redis.call('SREM', KEYS[4], ARGV[2]) end
return 1
