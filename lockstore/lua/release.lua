-- release.lua: delete a lock the caller holds, and wake the next waiter.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- KEYS[2]  the wait queue, "lockgw:{<key>}:queue"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  the key's notification channel, "lockgw:{<key>}:released"
-- ARGV[3]  Redlock only (absent for Redis): the attempt field the value must
--          carry (see acquire.lua; "" for a value without one), as Release
--          read it a moment before. Any acquire round that takes the lease
--          over changes the field, so a delete that lands late cannot
--          remove a later grant to the same token.
--
-- Returns
--   1   released
--   0   not held (never taken, released, or expired)
--   -1  held by another digest; left as it is
--   -2  held by the same digest, but its attempt field is no longer ARGV[3]
--       (an acquire round took it over since); left as it is
--
-- Only the first waiter is told (the message is its id), so a release costs
-- one wake-up, not one per waiter. With nobody queued the message is "*",
-- for waiters without a queue (Redlock's); with nobody listening, PUBLISH
-- costs next to nothing.
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
if string.sub(cur, 1, 64) ~= ARGV[1] then
  return -1
end
if ARGV[3] then
  local field = ''
  if string.sub(cur, 66, 66) == '~' then
    field = string.match(string.sub(cur, 66), '^([^:]*):')
  end
  if field ~= ARGV[3] then
    return -2
  end
end
redis.call('DEL', KEYS[1])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call('PUBLISH', ARGV[2], head or '*')
return 1
