-- inspect.lua: read a lock, the time it has left and its expiry, in one
-- atomic step. Writes nothing.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
--
-- Returns
--   {value, pttl, expiry}  held; value is "<digest>:<fence>:<owner>" (see
--                          acquire.lua for the others), pttl in ms, expiry
--                          Unix ms (PEXPIRETIME, Redis 7): with the value,
--                          the version a release deletes (release.lua)
--   {}                     not held
local cur = redis.call('GET', KEYS[1])
if not cur then
  return {}
end
return {cur, redis.call('PTTL', KEYS[1]), redis.call('PEXPIRETIME', KEYS[1])}
