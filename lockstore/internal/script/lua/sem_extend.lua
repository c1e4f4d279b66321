-- sem_extend.lua: reset the TTL of the caller's permit (layout:
-- sem_common.lua).
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set
-- KEYS[3]  the forced releases, "lockgw:{sem#<key>}:forced" (sem_release.lua
--          ARGV[5]): read only when the caller holds no permit
-- ARGV[1]  SHA-256 of the token
-- ARGV[2]  new TTL in ms from now; "0" for the permit's own length
-- ARGV[3]  Redlock only: "1" (ignored: every extend only lengthens, and
--          always moves the expiry, see sem_common.lua's moved)
-- ARGV[4]  how to tell watchers (watch_sem.go): PUBLISH or SPUBLISH, on
--          the semaphore's channel (KEYS[1] with "released" for
--          "permits": the same hash tag)
--
-- Returns {1, value, slot, limit} extended; {0} no permit held at all,
-- or the caller's not confirmed yet (Redlock); {-1} permits held, none
-- the caller's; {-4, code}: code 0 or -1 as above, and a forced release
-- took the caller's permit, which would not have ended yet (KEYS[3]; it
-- writes nothing). An expired permit stays expired.
local now = clock()
local function gone(code)
  local at = redis.call('ZSCORE', KEYS[3], ARGV[1])
  if at and tonumber(at) > now then
    return {-4, code}
  end
  return {code}
end
if open(KEYS[1], KEYS[2], now) == 0 then
  return gone(0)
end
local slot, p = mine(KEYS[1], ARGV[1], now)
if not slot then
  return gone(-1)
end
-- A Redlock round's value not confirmed yet is no permit (docs/safety.md,
-- "Semaphores", E): not held.
if string.sub(p.field, 1, 1) == '~' and not p.confirmed then
  return {0}
end
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  ttl = tonumber(p.length)
else
  p.length = ARGV[2]
end
-- On Redlock too: an extend that wrote nothing (the same length, a permit
-- already longer) let a release that read the permit before it delete it
-- after it was answered (docs/safety.md, "Cases", 5).
p.exp = moved(p.exp, now + ttl)
local value = put(KEYS[1], KEYS[2], slot, p, now)
redis.call(ARGV[4], string.sub(KEYS[1], 1, -8) .. 'released', '!extended')
return {1, value, tonumber(slot), tonumber(redis.call('HGET', KEYS[1], 'limit')) or 0}
