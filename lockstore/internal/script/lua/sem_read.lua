-- sem_read.lua: read the caller's permit (layout: sem_common.lua). Writes
-- nothing.
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set
-- ARGV[1]  SHA-256 of the token
--
-- Returns {value, slot} when the digest holds a live permit; {0} when the
-- semaphore has no live permit at all; {-1} when it has some, none the
-- caller's. The value carries the permit's expiry, so it names the permit
-- as it is now: sem_release.lua deletes it only if it is still that value.
local now = clock()
local slot, p = mine(KEYS[1], ARGV[1], now)
if slot and p.exp > now then
  return {p.value, tonumber(slot)}
end
local e = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'LIMIT', 0, 1)
if #e == 0 then
  return {0}
end
return {-1}
