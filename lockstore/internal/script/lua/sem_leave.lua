-- sem_leave.lua: take a waiter out of a semaphore's queue (as leave.lua).
--
-- KEYS[1]  the wait queue   KEYS[2]  the heartbeats (per gateway; an
--                           older gateway's ticket has its own)
-- ARGV[1]  the waiter's ticket  ARGV[2]  the channel  ARGV[3]  PUBLISH or SPUBLISH
local first = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2]) -- the heartbeats go with the last ticket
end
if first == ARGV[1] then
  local head = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
  if head then
    redis.call(ARGV[3], ARGV[2], head)
  end
end
return removed
