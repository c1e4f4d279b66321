-- sem_raise.lua: Redlock only. Make a permit's fence F known to a node of
-- the majority that granted it, as raise_fence.lua does for a lock.
--
-- KEYS[1]  the permits hash       KEYS[2]  the fence counter
-- ARGV[1]  SHA-256 of the token   ARGV[2]  the round's attempt id
-- ARGV[3]  F                      ARGV[4]  the fence margin in ms
-- ARGV[5]  the slot
--
-- Returns 1 when the round still holds the slot here (now carrying F, and
-- the counter is at least F); 0 otherwise, nothing changed.
local now, now_us = clock()
local _, permits = load(KEYS[1], now)
local p = permits[tonumber(ARGV[5])]
if not p or p.digest ~= ARGV[1] or string.sub(p.field, 1, 1) ~= '~' or string.sub(p.field, 2, 2) == '!' then
  return 0
end
local found = false
for id in string.gmatch(string.sub(p.field, 2), '[^.]+') do
  if id == ARGV[2] then
    found = true
  end
end
if not found then
  return 0
end
p.fence = ARGV[3]
redis.call('HSET', KEYS[1], ARGV[5], encode(p))
local f = tonumber(ARGV[3])
if (tonumber(redis.call('GET', KEYS[2])) or 0) < f then
  local ahead = math.ceil((f - now_us) / 1000)
  local life = math.max(p.exp - now, ahead) + tonumber(ARGV[4])
  redis.call('SET', KEYS[2], ARGV[3], 'PX', math.max(life, redis.call('PTTL', KEYS[2])))
end
return 1
