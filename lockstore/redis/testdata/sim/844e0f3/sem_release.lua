-- sem_release.lua: give the caller's permit back (layout: sem_common.lua).
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set   KEYS[3]  the wait queue
-- ARGV[1]  SHA-256 of the token
-- ARGV[2]  the notification channel  ARGV[3]  PUBLISH or SPUBLISH
-- ARGV[4]  Redlock only: the attempt field the caller read; the permit is
--          deleted only if it still carries it (see release.lua)
--
-- Returns 1 released; 0 no permit held at all; -1 permits held, none the
-- caller's; -2 (Redlock) the permit's attempt field changed since it was
-- read: nothing changed.
local now = clock()
if open(KEYS[1], KEYS[2], now) == 0 then
  return 0
end
local slot, p = mine(KEYS[1], ARGV[1])
if not slot then
  return -1
end
if ARGV[4] and p.field ~= ARGV[4] then
  return -2
end
drop(KEYS[1], KEYS[2], slot, p.digest)
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
redis.call(ARGV[3], ARGV[2], head or '*')
return 1
