-- confirm.lua: Redlock only. Make one node's value of a round's grant a
-- lease: its fence F, confirmed, and its full TTL (docs/safety.md, "The
-- rules", C(m, F)). deadline.lua comes first (rule D): a confirmation that
-- lands after the gateway may have answered 503 writes nothing.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"; its value is
--          "<digest>:~<maker>:<fence>[+|++]<ms>:<owner>" (acquire.lua)
-- KEYS[2]  the key's fence counter, "lockgw:{<key>}:fence"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  the maker the round found on this node: acquire.lua's answer
-- ARGV[3]  the grant's fence F, a decimal integer
-- ARGV[4]  the fence margin in milliseconds (see acquire.lua): a raised
--          counter lives until the lease ends and Redis TIME has passed F,
--          plus this margin
-- ARGV[5]  the lease's TTL in milliseconds
--
-- Returns
--   {1, value, expiry}  the value was digest's, made by ARGV[2], not
--                       confirmed yet, with a fence of at most F: it now
--                       carries F confirmed ("<F>++<ms>"), the counter is
--                       at least F, and its expiry moved to max(expiry +
--                       1 ms, now + ARGV[5]); value and expiry (Unix ms) as
--                       left, which a failed round may delete as read
--                       (release.lua) and nothing else: this round alone
--                       made it a lease
--   {3}                 the same, on a value another round had confirmed
--                       already: its fence is now F; not this round's to
--                       delete
--   {2}                 the value's fence is above F (a twin raised it
--                       since the votes): nothing changed, not confirmed
--   {0}                 the value is gone, another token's, or another
--                       round's: nothing changed
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 64) ~= ARGV[1] then
  return {0}
end
local field, fence, plus, length, owner = string.match(string.sub(cur, 66), '^~([^:]*):([^:+]*)(%+*)([^:]*):(.*)$')
-- A list "a.b" (an older gateway's) was made by a; a pinned "!y" by nobody.
if not field or string.match(field, '^[^.]*') ~= ARGV[2] then
  return {0}
end

-- Fences stay below 2^53, so the comparison as Lua numbers is exact; the
-- counter is written from ARGV[3] as given, never through tostring.
local f = tonumber(ARGV[3])
if tonumber(fence) > f then
  return {2}
end
local t = redis.call('TIME')
if (tonumber(redis.call('GET', KEYS[2])) or 0) < f then
  local ahead = math.ceil((f - (tonumber(t[1]) * 1000000 + tonumber(t[2]))) / 1000)
  redis.call('SET', KEYS[2], ARGV[3], 'PX', math.max(tonumber(ARGV[5]), ahead) + tonumber(ARGV[4]))
end
-- A value from before recorded lengths ("<fence>" alone) takes no mark.
local marked = length ~= ''
if marked then
  length = '++' .. length
end
local value = ARGV[1] .. ':~' .. field .. ':' .. ARGV[3] .. length .. ':' .. owner
redis.call('SET', KEYS[1], value, 'KEEPTTL')
-- Tell watchers (watch.go) a lease came to be or moved: a provisional
-- value was none (inspect reads skip it), on the key's channel.
redis.call('PUBLISH', string.sub(KEYS[1], 1, -5) .. 'released', '!acquired')
-- Lengthen: never back, always forward (docs/safety.md, fact X).
local before = redis.call('PEXPIRETIME', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
local after = redis.call('PEXPIRETIME', KEYS[1])
if after <= before then
  redis.call('PEXPIREAT', KEYS[1], before + 1)
  after = before + 1
end
if plus == '++' or not marked then
  return {3}
end
return {1, value, after}
