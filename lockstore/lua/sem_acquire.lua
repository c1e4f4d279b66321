-- sem_acquire.lua: grant a permit of a semaphore (layout: sem_common.lua).
--
-- KEYS[1]  the permits hash     KEYS[2]  the fence counter
-- KEYS[3]  the wait queue       KEYS[4]  the waiters' heartbeats
-- KEYS[5]  Redlock only: the node's lease horizon (see acquire.lua)
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  TTL in ms            ARGV[3]  owner
-- ARGV[4]  the limit L          ARGV[5]  the slot to take, 1 … L, or 0: any
-- ARGV[6]  Redlock's attempt id, "" for Redis
-- ARGV[7]  fence seed in µs (0: Redis TIME)
-- ARGV[8]  fence margin in ms (FenceMargin)
-- ARGV[9]  the waiter's id ("" when not waiting)
-- ARGV[10] the waiter's heartbeat in ms
-- ARGV[11] the notification channel  ARGV[12] PUBLISH or SPUBLISH
--
-- Returns
--   {1, value, slot}     granted anew, with a new fence
--   {2, value, slot}     the digest already held that slot: re-granted,
--                        fence kept (Redis resets the TTL; Redlock joins
--                        the attempt and only lengthens, as acquire.lua)
--   {0, ms, head, free…} not granted: no permit is free for the caller
--                        (ms until the first permit expires, or 0 when a
--                        free one is owed to earlier waiters), or ARGV[5]
--                        is held by another digest (ms until it expires);
--                        head 1 when the caller is first in the queue;
--                        free: up to 32 free slots, for Redlock's next try
--   {5, limit, ms}       the holders were granted under another limit (the
--                        caller's own permit included: a retry must name
--                        the limit it was granted under); the last of them
--                        expires in ms
--   {6, slot}            Redlock: the digest holds another slot than
--                        ARGV[5] here; nothing changed
--
-- Fairness (Redis): with k permits free, the first k waiters may take
-- them, a newcomer only one that no waiter is owed. The fence rule and
-- the counter's lifetime are acquire.lua's.
local now, now_us = clock()
local digest, ttl, limit, want = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
local attempt = ARGV[6]
if attempt == '' then
  attempt = nil
end
local waiter = ARGV[9]
local recorded, permits, n = load(KEYS[1], now)

local function raise_horizon(ms)
  local p = redis.call('PTTL', KEYS[5])
  if p == -2 then
    redis.call('SET', KEYS[5], '1', 'PX', ms)
  elseif p >= 0 and p < ms then
    redis.call('PEXPIRE', KEYS[5], ms)
  end
end
local function unqueue()
  if waiter ~= '' then
    redis.call('ZREM', KEYS[3], waiter)
    redis.call('ZREM', KEYS[4], waiter)
    -- The next waiter may take a permit still free, or must learn when
    -- the first one runs out.
    local next = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if next then
      redis.call(ARGV[12], ARGV[11], next)
    end
  end
end

if n > 0 and recorded and recorded ~= limit then
  return {5, recorded, latest(permits, now)}
end

local slot, p = mine(permits, digest)
if slot then
  if attempt and want ~= 0 and slot ~= want then
    return {6, slot}
  end
  if attempt then
    local _, dots = string.gsub(p.field, '%.', '')
    if p.field == '-' or string.sub(p.field, 2, 2) == '!' or dots >= 3 then
      p.field = '~!' .. attempt
    else
      p.field = p.field .. '.' .. attempt
    end
    p.exp = math.max(p.exp, now + ttl)
    raise_horizon(ttl)
  else
    p.exp = now + ttl
  end
  p.length = ARGV[2]
  local value = encode(p)
  redis.call('HSET', KEYS[1], tostring(slot), value)
  outlive(KEYS[1], p.exp - now)
  unqueue()
  return {2, value, slot}
end

-- The queue, as acquire.lua keeps it.
if redis.call('EXISTS', KEYS[4]) == 1 then
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  if #dead > 0 then
    redis.call('ZREM', KEYS[3], unpack(dead))
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  end
end
local rank
if waiter ~= '' then
  local heartbeat = tonumber(ARGV[10])
  redis.call('ZADD', KEYS[3], 'NX', now_us, waiter)
  redis.call('ZADD', KEYS[4], now + heartbeat, waiter)
  redis.call('PEXPIRE', KEYS[3], 2 * heartbeat)
  redis.call('PEXPIRE', KEYS[4], 2 * heartbeat)
  rank = redis.call('ZRANK', KEYS[3], waiter)
else
  rank = redis.call('ZCARD', KEYS[3])
end
local head = 0
if waiter ~= '' and rank == 0 then
  head = 1
end

local free = limit - n
local function refuse(ms)
  local reply = {0, ms, head}
  for s = 1, limit do
    if #reply >= 35 then
      break
    end
    if not permits[s] then
      reply[#reply + 1] = s
    end
  end
  return reply
end
if rank >= free then
  if free <= 0 then
    return refuse(earliest(permits, now))
  end
  return refuse(0)
end
if want == 0 then
  for s = 1, limit do
    if not permits[s] then
      want = s
      break
    end
  end
elseif want > limit then
  return refuse(0)
elseif permits[want] then
  return refuse(permits[want].exp - now)
end

local margin = tonumber(ARGV[8])
local seed = tonumber(ARGV[7]) or 0
if seed <= 0 then
  seed = now_us
end
local fence = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, seed, now_us - margin * 1000)
local ahead = math.ceil((fence - now_us) / 1000)
fence = string.format('%.0f', fence)
-- The counter outlives every permit on the key (a release leaves it be).
local life = math.max(ttl, ahead) + margin
local pttl = redis.call('PTTL', KEYS[2])
redis.call('SET', KEYS[2], fence, 'PX', math.max(life, pttl))

local field = '-'
if attempt then
  field = '~' .. attempt
  raise_horizon(ttl)
end
local value = encode({exp = now + ttl, digest = digest, field = field, fence = fence,
  length = ARGV[2], owner = ARGV[3]})
redis.call('HSET', KEYS[1], 'limit', ARGV[4], tostring(want), value)
outlive(KEYS[1], ttl)
unqueue()
return {1, value, want}
