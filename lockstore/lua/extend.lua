-- extend.lua: reset the TTL of a lock the caller holds.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  new TTL in milliseconds, counted from now
-- ARGV[3]  Redlock only (absent for Redis): "1" to only ever lengthen the
--          lease. An extend still on its way to a slow node when its answer
--          was sent may land after the token released and took the key
--          again; it must not shorten that later grant.
--
-- Returns
--   {1, value}  extended; value is the lock's value
--   {0}         not held (never taken, released, or expired)
--   {-1}        held by another digest
--
-- PEXPIRE only touches a key that exists, so an expired lock stays expired.
local cur = redis.call('GET', KEYS[1])
if not cur then
  return {0}
end
if string.sub(cur, 1, 64) ~= ARGV[1] then
  return {-1}
end
if ARGV[3] ~= '1' or redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1, cur}
