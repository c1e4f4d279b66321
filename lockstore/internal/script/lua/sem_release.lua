-- sem_release.lua: give the caller's permit back (layout: sem_common.lua).
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set   KEYS[3]  the wait queue
-- KEYS[4]  the forced releases, "lockgw:{sem#<key>}:forced": a sorted set,
--          a forced-out permit's digest → its expiry (ms), as release.lua's
-- ARGV[1]  SHA-256 of the token
-- ARGV[2]  the notification channel  ARGV[3]  PUBLISH or SPUBLISH
-- ARGV[4]  the permit's value as the caller read it (sem_read.lua); the
--          permit is deleted only if it still is that value, which carries
--          its expiry and (Redlock) its attempt field (see release.lua)
-- ARGV[5]  "1": a forced release (lockstore.Forcer): KEYS[4] records the
--          digest until the permit's expiry, never longer, for its holder's
--          next renewal (sem_extend.lua; docs/safety.md, "Forced
--          releases"); "0" or absent: nothing more
--
-- deadline.lua runs first (rule D of docs/safety.md, see release.lua): a
-- release that lands after its 503, or on another server, writes nothing.
--
-- Returns 1 released; 0 no permit held at all; -1 permits held, none the
-- caller's; -2 the permit changed since it was read: nothing changed.
local now = clock()
if open(KEYS[1], KEYS[2], now) == 0 then
  return 0
end
local slot, p = mine(KEYS[1], ARGV[1], now)
if not slot then
  return -1
end
if p.value ~= ARGV[4] then
  return -2
end
drop(KEYS[1], KEYS[2], slot, p.digest)
if ARGV[5] == '1' and p.exp > now then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  redis.call('ZADD', KEYS[4], string.format('%.0f', p.exp), p.digest)
  outlive(KEYS[4], p.exp - now)
end
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
redis.call(ARGV[3], ARGV[2], head or '*')
return 1
