-- window.lua: the rate limiter's step: take a user's window, or say how long
-- the window someone else took has left. One round trip, atomic.
--
-- KEYS[1]  the window, "lockgw:{ratelimit:<user>}:window"
-- ARGV[1]  an id the gateway made for this request (never a client's)
-- ARGV[2]  the window in milliseconds
--
-- Returns
--   0   admitted: this request took the window (or took it before: a
--       retried call with the same id is admitted again, not refused)
--   n   refused: n > 0 milliseconds are left in the current window
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return 0
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 1 then
  return 1 -- expiring this very millisecond
end
return pttl
