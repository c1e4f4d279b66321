-- sem_inspect.lua: the semaphore's permits (layout: sem_common.lua).
--
-- KEYS[1]  the permits hash
--
-- Returns {limit, now ms, slot1, value1, slot2, value2, …}; {} when no
-- permit is held.
local now = clock()
local limit, permits, n = load(KEYS[1], now)
if n == 0 then
  return {}
end
local reply = {limit or 0, now}
for slot, p in pairs(permits) do
  reply[#reply + 1] = slot
  reply[#reply + 1] = p.value
end
return reply
