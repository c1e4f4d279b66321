-- inspect.lua: read a lock and the time it has left, in one atomic step.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
--
-- Returns
--   {value, pttl}  held; value is "<digest>:<fence>:<owner>" (see
--                  acquire.lua for the others), pttl in ms
--   {}             not held
local cur = redis.call('GET', KEYS[1])
if not cur then
  return {}
end
return {cur, redis.call('PTTL', KEYS[1])}
