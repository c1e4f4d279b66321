-- acquire.lua: take a free lock, or re-grant it to the token that holds it.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"; its value is "<digest>:<fence>:<owner>"
-- KEYS[2]  the key's fence counter, "lockgw:{<key>}:fence"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  owner label (may be empty)
-- ARGV[4]  how long the fence counter outlives this grant, in milliseconds
--
-- Returns
--   {1, value}  acquired: a new grant with a new fence
--   {2, value}  the same digest already held it: TTL reset, fence unchanged
--   {0, pttl}   held by another digest; pttl = milliseconds it has left
--
-- The fence is max(counter + 1, Redis TIME in microseconds), so a counter
-- lost in a restart without persistence, or expired, restarts above every
-- fence handed out before (unless the host clock stepped back).
local cur = redis.call('GET', KEYS[1])
if cur then
  if string.sub(cur, 1, 64) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {2, cur}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local fence = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, now)
-- %.0f: tostring would print 1.7e+15 and lose digits; fences stay below 2^53.
fence = string.format('%.0f', fence)
redis.call('SET', KEYS[2], fence, 'PX', ARGV[4])

local value = ARGV[1] .. ':' .. fence .. ':' .. ARGV[3]
redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2])
return {1, value}
