-- sem_heartbeat.lua: keep one gateway's waiters of a semaphore in its
-- queue, and say which of them may take a permit now (as heartbeat.lua
-- does for a lock; layout: sem_common.lua). A gateway runs it about once a
-- second for each semaphore it has waiters on, for all of them at once
-- (sem_room.go): Redis work does not grow with the number of waiters.
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set
-- KEYS[3]  the wait queue     KEYS[4]  the heartbeats (gateway ids by
--                                      deadline, ms)
-- ARGV[1]  the gateway id
-- ARGV[2]  heartbeat in ms: a gateway not seen again within it died, and
--          its tickets are dropped when a walk of the queue meets them
-- ARGV[3]  the gateway's oldest local ticket, to check it is still queued
--
-- Returns {queued, ticket…}: queued is 1 when ARGV[3] is in the queue,
-- else 0 (the queue was lost, say to a restart without persistence: the
-- gateway's waiters must queue again); the tickets are this gateway's
-- among the first live ones that may take a free permit now (with k
-- permits free, the first k live tickets; the first one when nobody holds
-- a permit, whose grant tells the next). Writes nothing when the queue is
-- gone, so a lost queue is not brought back half empty.
if redis.call('EXISTS', KEYS[3]) == 0 then
  return {0}
end
local now = clock()
local heartbeat = tonumber(ARGV[2])
forget_dead(KEYS[3], KEYS[4], now)
redis.call('ZADD', KEYS[4], now + heartbeat, ARGV[1])
redis.call('PEXPIRE', KEYS[3], 2 * heartbeat)
redis.call('PEXPIRE', KEYS[4], 2 * heartbeat)

local n = open(KEYS[1], KEYS[2], now)
local free = 1 -- nobody holds a permit: the limit went with the last
local limit = tonumber(redis.call('HGET', KEYS[1], 'limit'))
if n > 0 and limit then
  free = limit - n
end
-- At least the first live ticket is looked at, so dead gateways' tickets
-- never stand first for long.
local live = live_tickets(KEYS[3], KEYS[4], math.max(free, 1), nil)
local reply = {0}
if redis.call('ZSCORE', KEYS[3], ARGV[3]) then
  reply[1] = 1
end
if free > 0 then
  local prefix = ARGV[1] .. '.'
  for _, t in ipairs(live) do
    if string.sub(t, 1, #prefix) == prefix then
      reply[#reply + 1] = t
    end
  end
end
return reply
