-- sem_unwait.lua: take back a new permit that fewer replicas acknowledged
-- than LOCKGW_REDIS_WAIT_REPLICAS asks for (redis_sem.go), if its slot is
-- still exactly what that grant left (layout: sem_common.lua), as
-- unwait.lua does for a lock.
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set   KEYS[3]  the wait queue
-- ARGV[1]  the slot the grant took
-- ARGV[2]  the value the grant wrote there
-- ARGV[3]  the notification channel  ARGV[4]  PUBLISH or SPUBLISH
--
-- deadline.lua runs first (rule D of docs/safety.md): a take-back that
-- lands after its grant's 503, or on another server, writes nothing.
--
-- Returns 1 deleted; 0 the slot is not what the grant left: left as it is.
--
-- The value carries the grant's fence, which no other grant has, and its
-- expiry to the millisecond. A renewal or an extend by the same token (a
-- twin request, or a retry after the grant's 503), which may have been
-- answered 200, always moves that expiry, by a millisecond if need be
-- (sem_acquire.lua, sem_extend.lua): so a value still equal is the grant's
-- own, never a permit a later request of the token was told it holds. The
-- fence counter is left as a release leaves it.
local now = clock()
open(KEYS[1], KEYS[2], now)
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or v ~= ARGV[2] then
  return 0
end
local p = parse(v)
drop(KEYS[1], KEYS[2], ARGV[1], p.digest)
-- Waiters that saw the grant wait for a release; this is one.
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
redis.call(ARGV[4], ARGV[3], head or '*')
return 1
