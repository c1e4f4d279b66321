-- release.lua: delete a lock the caller holds.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
--
-- Returns
--   1   released
--   0   not held (never taken, released, or expired)
--   -1  held by another digest; left as it is
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
if string.sub(cur, 1, 64) ~= ARGV[1] then
  return -1
end
redis.call('DEL', KEYS[1])
return 1
