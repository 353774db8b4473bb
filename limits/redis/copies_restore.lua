-- Restore: set this server's contributions to the given counts, whatever
-- they were (copies.Log.Restore).
-- KEYS: 1 this server's fence, 2 its set of count keys, 3.. count keys.
-- ARGV: 1 this server's field, 2.. the contribution wanted in each count
-- key, index for index (0: none).
-- Returns -1 when fenced, else 1.
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local f = ARGV[1]
for i = 3, #KEYS do
  local k, want = KEYS[i], tonumber(ARGV[i - 1])
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
return 1
