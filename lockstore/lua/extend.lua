-- extend.lua: reset the TTL of a lock the caller holds.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  new TTL in milliseconds, counted from now
--
-- Returns
--   {1, value}  extended; value is "<digest>:<fence>:<owner>"
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
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, cur}
