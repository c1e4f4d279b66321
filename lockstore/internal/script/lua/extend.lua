-- extend.lua: reset the TTL of a lock the caller holds.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- KEYS[2]  the key's forced releases, "lockgw:{<key>}:forced" (release.lua
--          ARGV[9]): read only when the caller's digest holds nothing
-- KEYS[3]  (absent without a quota) Redis only: the quota set of the user
--          the caller believes the lock counts against,
--          "lockgw:{quota:<user>}:locks" (see acquire.lua, "Counting"); the
--          lock's score there moves too
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  new TTL in milliseconds, counted from now (on Redis the lease
--          is never shortened: see lengthen below); "0" for the lease's
--          own length, the one it was last granted or extended with (the
--          "+<ms>" of the value's fence field), which the value keeps
-- ARGV[3]  Redlock only (absent for Redis): "1". A round's value not
--          confirmed yet ("~<maker>" without "++") is provisional, not a
--          lease to extend (docs/safety.md, "The rules", E): the answer is
--          {0}, as if it were not there.
-- ARGV[4]  Redis on a Cluster only (ARGV[3] then ""): "1": a user's quota
--          set lives in another slot, so none is passed and a counted lock
--          is extended like any other; the caller moves its count
--          (redis_cluster_quota.go).
--
-- Returns
--   {1, value, expiry}  extended; value is the lock's value, expiry its
--               PEXPIRETIME (Unix ms) as this script left it (rule V3)
--   {0}         not held (never taken, released, or expired)
--   {-1}        held by another digest
--   {-4, code}  code (0 or -1) as above, and a forced release took the
--               caller's lease, which would not have ended yet (KEYS[2])
--   {-2, user}  the lock counts against user, whose set is not KEYS[3] (or
--               none was passed): nothing changed; call again with it
--   {-3}        ARGV[2] is 0 and the value records no length (written by
--               an older gateway): nothing changed; name a TTL
--
-- PEXPIRE only touches a key that exists, so an expired lock stays expired.
-- An extend moves the expiry to max(expiry + 1 ms, now + ttl)
-- (lengthen, as in acquire.lua): it never shortens a lease, so one that
-- lands late cannot cut a lease a later extend was answered for, and it
-- always moves the expiry, so a release or a WAIT take-back that read the
-- lease before it finds it changed (docs/safety.md, "Late writes on
-- redis", rule V1). Redis 7.
local function lengthen(key, ms)
  local before = redis.call('PEXPIRETIME', key)
  redis.call('PEXPIRE', key, ms)
  local after = redis.call('PEXPIRETIME', key)
  if after <= before then
    redis.call('PEXPIREAT', key, before + 1)
    after = before + 1
  end
  return after
end

-- gone answers code, or {-4, code} when a forced release took the
-- caller's lease (release.lua, ARGV[9]) before that lease would have ended
-- (docs/safety.md, "Forced releases"). It is only ever an answer: it
-- writes nothing, so it changes no outcome of any script.
local function gone(code)
  local at = redis.call('ZSCORE', KEYS[2], ARGV[1])
  if at then
    local t = redis.call('TIME')
    if tonumber(at) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then
      return {-4, code}
    end
  end
  return {code}
end

local cur = redis.call('GET', KEYS[1])
if not cur then
  return gone(0)
end
if string.sub(cur, 1, 1) == 'L' and string.sub(cur, 2, 64) == string.sub(ARGV[1], 2) then
  return {0} -- the token's own lingering value (release.lua): released
end
if string.sub(cur, 1, 64) ~= ARGV[1] then
  return gone(-1)
end
local redlock = ARGV[3] == '1'
if redlock and string.match(cur, '^[^:]*:~') and not string.match(cur, '^[^:]*:~[^:]*:[^:+]*%+%+') then
  return {0} -- provisional: an acquire round's, not a lease yet
end
local user = nil
if not redlock and ARGV[4] ~= '1' and string.sub(cur, 66, 66) == '^' then
  user = string.match(cur, '^[^:]*:%^([^:]*):')
  if KEYS[3] ~= 'lockgw:{quota:' .. user .. '}:locks' then
    return {-2, user}
  end
end
local head, rest = string.sub(cur, 1, 65), string.sub(cur, 66)
local c = string.sub(rest, 1, 1)
if c == '~' or c == '^' then
  local f, r = string.match(rest, '^([^:]*:)(.*)$')
  head, rest = head .. f, r
end
-- "<fence>++<ms>": a Redlock fence marked confirmed (acquire.lua), kept.
local fence, plus, length, owner = string.match(rest, '^([^:+]*)(%+*)([^:]*):(.*)$')
if plus ~= '++' then
  plus = '+'
end
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  ttl = tonumber(length)
  if not ttl then
    return {-3}
  end
end
local ms = string.format('%.0f', ttl)
local value = head .. fence .. plus .. ms .. ':' .. owner
if value ~= cur then
  -- Recording a new length is a write that needs memory; a Redis out of
  -- memory refuses it, and the extend still happens (PEXPIRE needs none),
  -- the lease keeping its old recorded length.
  local r = redis.pcall('SET', KEYS[1], value, 'KEEPTTL')
  if type(r) == 'table' and r.err then
    value = cur
  end
end
local at = lengthen(KEYS[1], ms)
if user then
  local t = redis.call('TIME')
  local left = at - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  redis.call('ZADD', KEYS[3], string.format('%.0f', at), KEYS[1])
  if redis.call('PTTL', KEYS[3]) < left then
    redis.call('PEXPIRE', KEYS[3], left)
  end
end
-- Tell watchers (watch.go) the lease moved, on the key's channel
-- (KEYS[1] with "released" for "lock"; same hash tag, so a Cluster script
-- may SPUBLISH to it); waiters ignore the message.
local channel = string.sub(KEYS[1], 1, -5) .. 'released'
if ARGV[4] == '1' then
  redis.call('SPUBLISH', channel, '!extended')
else
  redis.call('PUBLISH', channel, '!extended')
end
return {1, value, at}
