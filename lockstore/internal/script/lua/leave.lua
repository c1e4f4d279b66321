-- leave.lua: take a waiter out of the queue (its wait ran out, or its
-- client went away), and tell the one now first: it may take a free lock,
-- or must learn when the holder's lease runs out.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock" (unused; names the slot)
-- KEYS[2]  the wait queue, "lockgw:{<key>}:queue"
-- KEYS[3]  the heartbeats, "lockgw:{<key>}:alive" (see acquire.lua)
-- ARGV[1]  the waiter's ticket
-- ARGV[2]  the key's notification channel, "lockgw:{<key>}:released"
-- ARGV[3]  how to tell the one now first: "PUBLISH", or "SPUBLISH" on a
--          Redis Cluster (sharded pub/sub, Redis 7: the notification stays
--          on this key's shard; ARGV[2] shares the lock's hash tag)
--
-- Returns 1 when the waiter was queued, 0 when it was not.
local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
local removed = redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1]) -- an older gateway's ticket has its own
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[3]) -- the heartbeats go with the last ticket
end
if first == ARGV[1] then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if head then
    redis.call(ARGV[3], ARGV[2], head)
  end
end
return removed
