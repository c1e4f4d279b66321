-- sem_confirm.lua: Redlock only. Make one node's value of a round's permit
-- a lease: its fence F, confirmed, and its full TTL; confirm.lua for the
-- value in one slot (docs/safety.md, "Semaphores", C(m, F, s)).
-- deadline.lua comes first (rule D): a confirmation that lands after the
-- gateway may have answered 503 writes nothing.
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set   KEYS[3]  the fence counter
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  the maker the round found on this node: sem_acquire.lua's answer
-- ARGV[3]  the permit's fence F, a decimal integer
-- ARGV[4]  the fence margin in ms (as acquire.lua)
-- ARGV[5]  the slot
-- ARGV[6]  the permit's TTL in ms
-- ARGV[7]  the semaphore's notification channel
--
-- Returns
--   {1, value}  the slot's value was the digest's, made by ARGV[2], not
--               confirmed yet, with a fence of at most F: it now carries F
--               confirmed, the counter is at least F, and its expiry moved
--               to max(expiry + 1 ms, now +
--               ARGV[6]); value as left (it carries the expiry), which a
--               failed round may delete as read (sem_release.lua) and
--               nothing else: this round alone made it a lease
--   {3}         the same, on a value another round had confirmed already
--   {2}         the value's fence is above F (a twin raised it since the
--               votes): nothing changed, not confirmed
--   {0}         the value is gone, another token's, in another slot, or
--               another round's: nothing changed
--
-- Only confirmations raise a permit counter on Redlock (sem_acquire.lua's
-- votes read it and leave it alone): it is the highest fence confirmed on
-- the node, which a vote's floor is above (R2, R3).
local now, now_us = clock()
open(KEYS[1], KEYS[2], now)
local slot, p = mine(KEYS[1], ARGV[1], now)
if not slot or slot ~= ARGV[5] or maker(p) ~= ARGV[2] then
  return {0}
end
-- Fences stay below 2^53, so the comparisons as Lua numbers are exact; the
-- counter and the value take ARGV[3] as given, never through tostring.
local f = tonumber(ARGV[3])
if tonumber(p.fence) > f then
  return {2}
end
local c = counter(KEYS[3])
local ttl = tonumber(ARGV[6])
if c < f then
  local life = math.max(ttl, math.ceil((f - now_us) / 1000)) + tonumber(ARGV[4])
  redis.call('SET', KEYS[3], ARGV[3], 'PX', math.max(life, redis.call('PTTL', KEYS[3])))
end
local was = p.confirmed
p.fence, p.confirmed, p.length = ARGV[3], true, ARGV[6]
p.exp = moved(p.exp, now + ttl)
local value = put(KEYS[1], KEYS[2], slot, p, now)
-- Tell watchers (watch_sem.go) a permit came to be: a provisional value
-- was none (inspect reads skip it).
redis.call('PUBLISH', ARGV[7], '!acquired')
if was then
  return {3}
end
return {1, value}
