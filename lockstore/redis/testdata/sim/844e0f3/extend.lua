-- extend.lua: reset the TTL of a lock the caller holds.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- KEYS[2]  (absent without a quota) Redis only: the quota set of the user
--          the caller believes the lock counts against,
--          "lockgw:{quota:<user>}:locks" (see acquire.lua, "Counting"); the
--          lock's score there moves too
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  new TTL in milliseconds, counted from now; "0" for the lease's
--          own length, the one it was last granted or extended with (the
--          "+<ms>" of the value's fence field), which the value keeps
-- ARGV[3]  Redlock only (absent for Redis): "1" to only ever lengthen the
--          lease. An extend still on its way to a slow node when its answer
--          was sent may land after the token released and took the key
--          again; it must not shorten that later grant. KEYS[2] is then the
--          node's lease horizon, "lockgw:redlock:horizon", raised to outlive
--          the lease (see acquire.lua).
-- ARGV[4]  Redis on a Cluster only (ARGV[3] then ""): "1": a user's quota
--          set lives in another slot, so none is passed and a counted lock
--          is extended like any other; the caller moves its count
--          (redis_cluster.go).
--
-- Returns
--   {1, value}  extended; value is the lock's value
--   {0}         not held (never taken, released, or expired)
--   {-1}        held by another digest
--   {-2, user}  the lock counts against user, whose set is not KEYS[2] (or
--               none was passed): nothing changed; call again with it
--   {-3}        ARGV[2] is 0 and the value records no length (written by
--               an older gateway): nothing changed; name a TTL
--
-- PEXPIRE only touches a key that exists, so an expired lock stays expired.
-- reset_ttl sets the lock's TTL to ms and makes sure its expiry moves, by
-- a millisecond if need be: a new grant that too few replicas acknowledged
-- is taken back only while its expiry is unchanged (unwait.lua), so a
-- renewal or extend by the same token, which may be answered 200, must
-- never leave it where the grant put it, even in the same millisecond with
-- the same TTL. PEXPIRETIME is Redis 7; an older Redis skips the check
-- (WAIT's take-back needs Redis 7 anyway).
local function reset_ttl(key, ms)
  local before = redis.pcall('PEXPIRETIME', key)
  redis.call('PEXPIRE', key, ms)
  if type(before) == 'number' and redis.call('PEXPIRETIME', key) == before then
    redis.call('PEXPIRE', key, tonumber(ms) + 1)
  end
end

local cur = redis.call('GET', KEYS[1])
if not cur then
  return {0}
end
if string.sub(cur, 1, 64) ~= ARGV[1] then
  return {-1}
end
local redlock = ARGV[3] == '1'
local user = nil
if not redlock and ARGV[4] ~= '1' and string.sub(cur, 66, 66) == '^' then
  user = string.match(cur, '^[^:]*:%^([^:]*):')
  if KEYS[2] ~= 'lockgw:{quota:' .. user .. '}:locks' then
    return {-2, user}
  end
end
local head, rest = string.sub(cur, 1, 65), string.sub(cur, 66)
local c = string.sub(rest, 1, 1)
if c == '~' or c == '^' then
  local f, r = string.match(rest, '^([^:]*:)(.*)$')
  head, rest = head .. f, r
end
local fence, length, owner = string.match(rest, '^([^:+]*)%+?([^:]*):(.*)$')
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  ttl = tonumber(length)
  if not ttl then
    return {-3}
  end
end
local ms = string.format('%.0f', ttl)
if redlock then
  -- Before any write, as in acquire.lua; PEXPIRE needs no memory.
  local p = redis.call('PTTL', KEYS[2])
  if p == -2 then
    redis.call('SET', KEYS[2], '1', 'PX', ms)
  elseif p >= 0 and p < ttl then
    redis.call('PEXPIRE', KEYS[2], ms)
  end
end
local value = head .. fence .. '+' .. ms .. ':' .. owner
if value ~= cur then
  -- Recording a new length is a write that needs memory; a Redis out of
  -- memory refuses it, and the extend still happens (PEXPIRE needs none),
  -- the lease keeping its old recorded length.
  local r = redis.pcall('SET', KEYS[1], value, 'KEEPTTL')
  if type(r) == 'table' and r.err then
    value = cur
  end
end
if not redlock then
  reset_ttl(KEYS[1], ms)
elseif redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ms)
end
if user then
  local t = redis.call('TIME')
  local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl
  redis.call('ZADD', KEYS[2], string.format('%.0f', at), KEYS[1])
  if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('PEXPIRE', KEYS[2], ttl)
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
return {1, value}
