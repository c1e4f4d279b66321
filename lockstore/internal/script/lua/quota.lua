-- quota.lua: Redis Cluster only: a user's count of live locks, kept in the
-- user's own slot, apart from the locks (one script cannot touch both on a
-- Cluster; see redis_cluster_quota.go for the order of the steps and what a
-- crash between them leaves).
--
-- KEYS[1]  the user's quota set, "lockgw:{quota:<user>}:locks": one member
--          per counted lock, "<lock key>#<token digest>", scored by when it
--          stops counting (ms, this node's Redis TIME); members whose time
--          has passed do not count
-- ARGV[1]  "reserve": count a lock about to be taken, if the cap allows;
--          "move": set when a counted lock stops counting (an extend or a
--          renewal moved its expiry; only ever later, as the lease's
--          own: a lease is never shortened)
-- ARGV[2]  the member
-- ARGV[3]  milliseconds from now until the member stops counting: the
--          lease's TTL
-- ARGV[4]  reserve: the cap on the user's live locks
--
-- Returns
--   reserve: {1}      counted (a new member)
--            {2}      already counted (the same token's lock: a renewal or
--                     a retry); its time moved to ARGV[3] from now, if
--                     that is later
--            {4, ms}  not counted: the user has ARGV[4] live locks; the
--                     earliest stops counting in ms
--   move:    1 moved, 0 not counted (absent, or its time has passed: a
--            member that stopped counting never comes back)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ms = tonumber(ARGV[3])
local at = string.format('%.0f', now + ms)
-- The set lives as long as its last member counts.
local function keep()
  if redis.call('PTTL', KEYS[1]) < ms then
    redis.call('PEXPIRE', KEYS[1], ms)
  end
end
local score = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[2]) or '-1')
if ARGV[1] == 'move' then
  if score < now then
    return 0
  end
  redis.call('ZADD', KEYS[1], 'GT', at, ARGV[2])
  keep()
  return 1
end
if score >= now then
  redis.call('ZADD', KEYS[1], 'GT', at, ARGV[2])
  keep()
  return {2}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now))
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {4, math.max(tonumber(first[2]) - now, 0)}
end
redis.call('ZADD', KEYS[1], at, ARGV[2])
keep()
return {1}
