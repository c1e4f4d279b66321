-- sem_inspect.lua: the semaphore's permits (layout: sem_common.lua).
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set
--
-- Returns {limit, now ms, slot1, value1, slot2, value2, …}; {} when no
-- permit is held.
local now = clock()
if open(KEYS[1], KEYS[2], now) == 0 then
  return {}
end
local reply = {tonumber(redis.call('HGET', KEYS[1], 'limit')) or 0, now}
for _, slot in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local v = redis.call('HGET', KEYS[1], slot)
  if v then
    reply[#reply + 1] = tonumber(slot)
    reply[#reply + 1] = v
  end
end
return reply
