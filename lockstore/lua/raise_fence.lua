-- raise_fence.lua: make a Redlock grant's fence known to one node of the
-- majority that granted it, so that any later majority (which shares at least
-- one node with this one) hands out a larger fence.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"; its value is "<digest>:<fence>:<owner>"
-- KEYS[2]  the key's fence counter, "lockgw:{<key>}:fence"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  the grant's fence F, a decimal integer
-- ARGV[3]  how long a raised counter lives, in milliseconds
--
-- Returns
--   1  the lock is the caller's: its value now carries F (its TTL is kept),
--      and the counter is at least F
--   0  the lock is not the caller's (expired, released, or another's):
--      nothing changed
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 64) ~= ARGV[1] then
  return 0
end

-- Fences stay below 2^53, so the comparison as Lua numbers is exact; the
-- counter is written from ARGV[2] as given, never through tostring.
if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end

-- cur is "<digest>:<fence>:<owner>"; the owner is everything after the
-- second colon and may itself contain colons.
local rest = string.sub(cur, 66)
local colon = string.find(rest, ':', 1, true)
local owner = colon and string.sub(rest, colon + 1) or ''
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. ARGV[2] .. ':' .. owner, 'KEEPTTL')
return 1
