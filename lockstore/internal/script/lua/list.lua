-- list.lua: read one lock for a listing, in one atomic step: its value,
-- the time it has left and how many wait for it. It reads only.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- KEYS[2]  its wait queue, "lockgw:{<key>}:queue"
--
-- Returns
--   {value, pttl, waiters}  held; value as in inspect.lua, pttl in ms,
--                           waiters the queue's length (ZCARD)
--   {}                      not held (it ended since the listing's SCAN)
local cur = redis.call('GET', KEYS[1])
if not cur then
  return {}
end
return {cur, redis.call('PTTL', KEYS[1]), redis.call('ZCARD', KEYS[2])}
