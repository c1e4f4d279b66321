-- unwait.lua: take back a new grant that fewer replicas acknowledged than
-- LOCKGW_REDIS_WAIT_REPLICAS asks for (redis_replicas.go), if the lock is still
-- exactly what that grant left: its value and its expiry.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- KEYS[2]  the wait queue, "lockgw:{<key>}:queue"
-- KEYS[3]  the key's fence counter, "lockgw:{<key>}:fence"
-- KEYS[4]  (absent without a quota) the quota set the grant counted the
--          lock in, "lockgw:{quota:<user>}:locks"
-- ARGV[1]  the value the grant wrote
-- ARGV[2]  the lock's expiry the grant left, Unix time in ms (PEXPIRETIME,
--          read in the same MULTI as the grant)
-- ARGV[3]  the key's notification channel, "lockgw:{<key>}:released"
-- ARGV[4]  the fence margin in milliseconds (see acquire.lua)
--
-- deadline.lua runs first (rule D of docs/safety.md): a take-back that
-- lands after its grant's 503, or on another server, writes nothing.
--
-- Returns
--   1  deleted
--   0  the lock is not what the grant left: left as it is
--
-- The value carries the grant's fence, which no other grant has, so a
-- different value is another grant. The same value with another expiry is
-- the same lease renewed or extended since by its token (a twin request,
-- or a retry after this grant's 503), which may have been answered 200:
-- deleting it would take a lease from a client told it holds it. Expiries
-- are kept to the millisecond, and a renewal or extend in the grant's
-- millisecond with its TTL moves the expiry one millisecond on (reset_ttl
-- in acquire.lua and extend.lua), so every later write by the token
-- changes it.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if redis.call('PEXPIRETIME', KEYS[1]) ~= tonumber(ARGV[2]) then
  return 0
end
redis.call('DEL', KEYS[1])
if KEYS[4] then
  redis.call('ZREM', KEYS[4], KEYS[1])
end
-- As release.lua: the counter outlives the fence by the margin, no more.
local counter = tonumber(redis.call('GET', KEYS[3]))
if counter then
  local t = redis.call('TIME')
  local ahead = math.ceil((counter - (tonumber(t[1]) * 1000000 + tonumber(t[2]))) / 1000)
  redis.call('PEXPIRE', KEYS[3], math.max(ahead, 0) + tonumber(ARGV[4]))
end
-- Waiters that saw the grant wait for a release; this is one. WAIT is
-- refused on a Cluster (OpenRedis), so the classic PUBLISH reaches them.
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call('PUBLISH', ARGV[3], head or '*')
return 1
