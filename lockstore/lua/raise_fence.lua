-- raise_fence.lua: make a Redlock grant's fence known to one node of the
-- majority that granted it, so that any later majority (which shares at least
-- one node with this one) hands out a larger fence.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"; its value is
--          "<digest>:<attempt>:<fence>:<owner>"
-- KEYS[2]  the key's fence counter, "lockgw:{<key>}:fence"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  the round's attempt id
-- ARGV[3]  the grant's fence F, a decimal integer
-- ARGV[4]  the fence margin in milliseconds (see acquire.lua): a raised
--          counter lives until the lease ends and Redis TIME has passed F,
--          plus this margin
--
-- Returns
--   1  the round still holds the value (its id is in the attempt field,
--      see acquire.lua): it now carries F, marked confirmed ("<F>++<ms>",
--      see acquire.lua; its TTL is kept), and the counter is at least F
--   0  the value is gone, another token's, or no longer this round's
--      (released and taken again, or pinned by later rounds): nothing
--      changed
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 64) ~= ARGV[1] then
  return 0
end
-- The fence field may carry the lease's length, "<fence>+<ms>": kept, and
-- the fence marked confirmed, "<fence>++<ms>" (a value from an older
-- gateway, without a length, takes no mark).
local field, length, owner = string.match(string.sub(cur, 66), '^([^:]*):[^:+]*%+*([^:]*):(.*)$')
if not field or string.sub(field, 1, 1) ~= '~' or string.sub(field, 2, 2) == '!' then
  return 0
end
local member = false
for id in string.gmatch(string.sub(field, 2), '[^.]+') do
  member = member or id == ARGV[2]
end
if not member then
  return 0
end

-- Fences stay below 2^53, so the comparison as Lua numbers is exact; the
-- counter is written from ARGV[3] as given, never through tostring.
if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[3]) then
  local t = redis.call('TIME')
  local ahead = math.ceil((tonumber(ARGV[3]) - (tonumber(t[1]) * 1000000 + tonumber(t[2]))) / 1000)
  local lease = math.max(redis.call('PTTL', KEYS[1]), 0)
  redis.call('SET', KEYS[2], ARGV[3], 'PX', math.max(lease, ahead) + tonumber(ARGV[4]))
end
if length ~= '' then
  length = '++' .. length
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. field .. ':' .. ARGV[3] .. length .. ':' .. owner, 'KEEPTTL')
return 1
