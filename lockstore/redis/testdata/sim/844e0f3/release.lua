-- release.lua: delete a lock the caller holds, and wake the next waiter.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- KEYS[2]  the wait queue, "lockgw:{<key>}:queue"
-- KEYS[3]  the key's fence counter, "lockgw:{<key>}:fence"
-- KEYS[4]  (absent without a quota) Redis only: the quota set of the user
--          the caller believes the lock counts against,
--          "lockgw:{quota:<user>}:locks" (see acquire.lua, "Counting")
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  the key's notification channel, "lockgw:{<key>}:released"
-- ARGV[3]  the fence margin in milliseconds (see acquire.lua): the lease is
--          over, so the counter now lives until Redis TIME has passed it,
--          plus this margin
-- ARGV[4]  how to tell the next waiter: "PUBLISH", or "SPUBLISH" on a Redis
--          Cluster (sharded pub/sub, Redis 7: the notification stays on
--          this key's shard; ARGV[2] shares the lock's hash tag)
-- ARGV[5]  Redlock only (absent for Redis): the attempt field the value must
--          carry (see acquire.lua; "" for a value without one), as Release
--          read it a moment before. Any acquire round that takes the lease
--          over changes the field, so a delete that lands late cannot
--          remove a later grant to the same token.
--
-- Returns
--   1   released
--   0   not held (never taken, released, or expired)
--   -1  held by another digest; left as it is
--   -2  held by the same digest, but its attempt field is no longer ARGV[5]
--       (an acquire round took it over since); left as it is
--   {-3, user}  the lock counts against user, whose set is not KEYS[4] (or
--       none was passed); left as it is: call again with that user's set
--   {1, user}  on a Cluster (ARGV[4] "SPUBLISH"), where a quota set lives in
--       another slot and no KEYS[4] is passed: released; the lock counted
--       against user, and the caller takes it out of that user's set
--
-- Only the first waiter is told (the message is its id), so a release costs
-- one wake-up, not one per waiter. With nobody queued the message is "*",
-- for waiters without a queue (Redlock's); with nobody listening, a publish
-- costs next to nothing.
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
if string.sub(cur, 1, 64) ~= ARGV[1] then
  return -1
end
local apart = ARGV[4] == 'SPUBLISH'
local user = nil
if string.sub(cur, 66, 66) == '^' then
  user = string.match(cur, '^[^:]*:%^([^:]*):')
  if not apart and KEYS[4] ~= 'lockgw:{quota:' .. user .. '}:locks' then
    return {-3, user}
  end
end
if ARGV[5] then
  local field = ''
  if string.sub(cur, 66, 66) == '~' then
    field = string.match(string.sub(cur, 66), '^([^:]*):')
  end
  if field ~= ARGV[5] then
    return -2
  end
end
redis.call('DEL', KEYS[1])
if user and not apart then
  redis.call('ZREM', KEYS[4], KEYS[1])
end
local counter = tonumber(redis.call('GET', KEYS[3]))
if counter then
  local t = redis.call('TIME')
  local ahead = math.ceil((counter - (tonumber(t[1]) * 1000000 + tonumber(t[2]))) / 1000)
  redis.call('PEXPIRE', KEYS[3], math.max(ahead, 0) + tonumber(ARGV[3]))
end
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call(ARGV[4], ARGV[2], head or '*')
if user and apart then
  return {1, user}
end
return 1
