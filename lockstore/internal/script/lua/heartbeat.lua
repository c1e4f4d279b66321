-- heartbeat.lua: keep one gateway's waiters of a key in its queue, and say
-- who is first. A gateway runs it about once a second for each key it has
-- waiters on, for all of them at once (wait_room.go): Redis work does not
-- grow with the number of waiters.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- KEYS[2]  the wait queue, "lockgw:{<key>}:queue": waiter tickets by
--          arrival (µs); a ticket is "<gateway>.<id>"
-- KEYS[3]  the heartbeats, "lockgw:{<key>}:alive": gateway ids by deadline
--          (ms); a ticket without "." (an older gateway's) is its own
-- ARGV[1]  the gateway id
-- ARGV[2]  heartbeat in milliseconds: a gateway not seen again within it
--          died, and its tickets are dropped when they come first
-- ARGV[3]  the gateway's oldest local ticket, to check it is still queued
--
-- Returns {head, pttl, queued}: the first live ticket ("" when none), the
-- lock's PTTL (-2 when free), and 1 when ARGV[3] is in the queue, else 0
-- (the queue was lost, say to a restart without persistence: the gateway's
-- waiters must queue again). Writes nothing when the queue is gone, so a
-- lost queue is not brought back half empty.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {'', redis.call('PTTL', KEYS[1]), 0}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local heartbeat = tonumber(ARGV[2])

-- Forget gateways (and older gateways' waiters) not refreshed in time.
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_ms)
if #dead > 0 then
  redis.call('ZREM', KEYS[2], unpack(dead))
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
end
redis.call('ZADD', KEYS[3], now_ms + heartbeat, ARGV[1])
redis.call('PEXPIRE', KEYS[2], 2 * heartbeat)
redis.call('PEXPIRE', KEYS[3], 2 * heartbeat)

-- The first ticket whose gateway is alive; dead ones ahead of it go, at
-- most 100 per call (the rest at the next), so the script stays short.
local head = nil
for _ = 1, 100 do
  head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not head then
    break
  end
  local gw = string.match(head, '^([^.]*)%.') or head
  if redis.call('ZSCORE', KEYS[3], gw) then
    break
  end
  redis.call('ZREM', KEYS[2], head)
  head = nil
end
if not head then -- more than 100 went: the rest go at the next call
  head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
end

local queued = 0
if ARGV[3] ~= '' and redis.call('ZSCORE', KEYS[2], ARGV[3]) then
  queued = 1
end
return {head or '', redis.call('PTTL', KEYS[1]), queued}
