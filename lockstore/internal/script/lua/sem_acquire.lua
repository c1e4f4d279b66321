-- sem_acquire.lua: grant a permit of a semaphore (layout: sem_common.lua).
--
-- KEYS[1]  the permits hash     KEYS[2]  the expiry set
-- KEYS[3]  the fence counter    KEYS[4]  the wait queue
-- KEYS[5]  the waiters' heartbeats
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  TTL in ms            ARGV[3]  owner
-- ARGV[4]  the limit L          ARGV[5]  Redlock: the slot to take, 1 … L;
--                                        Redis: 0, any
-- ARGV[6]  Redlock: this round's id, 22 characters of base64url; a value
--          this round makes records it as its maker, "~<id>", and lives
--          ARGV[13] ms (provisional) until a round confirms it
--          (sem_confirm.lua). "" for Redis.
-- ARGV[7]  fence seed in µs (0: Redis TIME)
-- ARGV[8]  fence margin in ms (FenceMargin)
-- ARGV[9]  the waiter's ticket, "<gateway>.<id>" ("" when not waiting;
--          an older gateway's has no "." and a heartbeat of its own)
-- ARGV[10] the heartbeat in ms: the tickets of a gateway not seen again
--          within it are dropped (sem_heartbeat.lua refreshes it for all
--          of a gateway's waiters of the key)
-- ARGV[11] the notification channel  ARGV[12] PUBLISH or SPUBLISH
-- ARGV[13] Redlock: the provisional TTL of a new value, ms; 0 for Redis
--
-- Returns
--   {1, value, slot}     granted anew, with a new fence
--   {2, value, slot}     the digest already held a permit: re-granted, fence
--                        kept, expiry moved forward (never back); on
--                        Redlock only a confirmed one: an unconfirmed
--                        value is answered as it is (the round that made
--                        it confirms it, or not), as acquire.lua. Redlock
--                        adds the floor, {2, value, slot, floor} (R3
--                        below; "0" when none)
--   {0, ms, head, free, slots…}
--                        not granted: no permit is free for the caller (ms
--                        until the first expires, or 0 when a free one is
--                        owed to earlier waiters), or ARGV[5] is held by
--                        another digest (ms until it expires); head 1 when
--                        the caller is first in the queue; free: how many
--                        permits are free; Redlock: up to 32 free slots,
--                        for its next try
--   {5, limit, ms}       the holders were granted under another limit (the
--                        caller's own permit included: a retry must name
--                        the limit it was granted under); the last of them
--                        expires in ms
--   {6, slot}            Redlock: the digest holds another slot than
--                        ARGV[5] here; nothing changed
--
-- Fairness (Redis): with k permits free, the first k waiters may take
-- them, a newcomer only one that no waiter is owed. The fence rule and
-- the counter's lifetime are acquire.lua's; on Redlock the fence is also
-- ≡ the slot (mod the limit), and a vote leaves the counter alone, which
-- only sem_confirm.lua raises (docs/safety.md, "Fences of permits", R1
-- and R2).
local now, now_us = clock()
local digest, ttl, limit, want = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
local attempt = ARGV[6]
if attempt == '' then
  attempt = nil
end
local waiter = ARGV[9]
local n = open(KEYS[1], KEYS[2], now)

local function unqueue()
  if waiter ~= '' then
    redis.call('ZREM', KEYS[4], waiter)
    redis.call('ZREM', KEYS[5], waiter) -- an older gateway's ticket has its own
    if redis.call('EXISTS', KEYS[4]) == 0 then
      redis.call('DEL', KEYS[5]) -- the heartbeats go with the last ticket
    end
    -- The next waiter may take a permit still free, or must learn when
    -- the first one runs out.
    local next = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
    if next then
      redis.call(ARGV[12], ARGV[11], next)
    end
  end
end

local recorded = tonumber(redis.call('HGET', KEYS[1], 'limit'))
if n > 0 and recorded and recorded ~= limit then
  return {5, recorded, last(KEYS[2], now)}
end

local slot, p = mine(KEYS[1], digest, now)
if slot then
  if attempt and tonumber(slot) ~= want then
    return {6, tonumber(slot)}
  end
  -- R3 (docs/safety.md, "Fences of permits"): the floor, the vote this
  -- node would cast now, for a round that finds a value voted before what
  -- the node knows now: its fence below the counter, or below the clock
  -- less the margin (a counter that was above it, another slot's permit
  -- confirmed since, may have expired). A new permit's fence is at least
  -- every granting node's floor. 0 for a value as fresh as a vote now (a
  -- twin's): twins still meet on one fence.
  local floor = 0
  if attempt then
    local c, lag = counter(KEYS[3]), now_us - tonumber(ARGV[8]) * 1000
    local f = tonumber(p.fence)
    if f < c or f < lag then
      local sd = tonumber(ARGV[7]) or 0
      floor = slot_fence(math.max(c + 1, sd, lag), want, limit)
    end
  end
  if attempt and string.sub(p.field, 1, 1) == '~' and not p.confirmed then
    return {2, p.value, tonumber(slot), string.format('%.0f', floor)}
  end
  p.exp = moved(p.exp, now + ttl)
  p.length = ARGV[2]
  local value = put(KEYS[1], KEYS[2], slot, p, now)
  unqueue()
  redis.call(ARGV[12], ARGV[11], '!extended') -- for watchers (watch_sem.go)
  if attempt then
    return {2, value, tonumber(slot), string.format('%.0f', floor)}
  end
  return {2, value, tonumber(slot)}
end

-- The queue (sem_common.lua): the caller's ticket joins it, and its
-- gateway's heartbeat is refreshed, as acquire.lua does.
forget_dead(KEYS[4], KEYS[5], now)
if waiter ~= '' then
  local heartbeat = tonumber(ARGV[10])
  redis.call('ZADD', KEYS[4], 'NX', now_us, waiter)
  redis.call('ZADD', KEYS[5], now + heartbeat, gateway_of(waiter))
  redis.call('PEXPIRE', KEYS[4], 2 * heartbeat)
  redis.call('PEXPIRE', KEYS[5], 2 * heartbeat)
end

local free = limit - n
local function refuse(ms, head)
  local reply = {0, ms, head, math.max(free, 0)}
  if attempt and free > 0 then
    -- Some free slots, probing from the one asked for: at most 256
    -- probes, so a nearly full semaphore of a large limit stays cheap.
    local s = want
    for _ = 1, math.min(limit, 256) do
      s = s % limit + 1
      if redis.call('HEXISTS', KEYS[1], tostring(s)) == 0 then
        reply[#reply + 1] = s
        if #reply >= 36 then
          break
        end
      end
    end
  end
  return reply
end
-- How many live tickets stand ahead of the caller (all of them for a
-- newcomer), counted up to free: the caller may take a permit only when
-- fewer than free do. A waiter ranked below free, or a newcomer behind a
-- queue shorter than free, needs no walk; otherwise the walk skips (and
-- drops) the tickets of dead gateways.
local ahead, head
if waiter ~= '' then
  ahead = redis.call('ZRANK', KEYS[4], waiter)
  if ahead > 0 and ahead >= free then
    local live = live_tickets(KEYS[4], KEYS[5], math.max(free, 1), waiter)
    ahead = #live
  end
  head = 0
  if ahead == 0 then
    head = 1
  end
else
  ahead = redis.call('ZCARD', KEYS[4])
  if ahead > 0 and ahead >= free and free > 0 then
    ahead = #live_tickets(KEYS[4], KEYS[5], free, nil)
  end
  head = 0
end
if ahead >= free then
  if free <= 0 then
    return refuse(first(KEYS[2], now), head)
  end
  return refuse(0, head)
end
if want == 0 then
  want = 10000 + redis.call('HINCRBY', KEYS[1], 'seq', 1)
elseif want > limit then
  return refuse(0, head)
else
  local other = parse(redis.call('HGET', KEYS[1], tostring(want)))
  if other then
    return refuse(other.exp - now, head)
  end
end

local margin = tonumber(ARGV[8])
local seed = tonumber(ARGV[7]) or 0
if seed <= 0 then
  seed = now_us
end
local fence = math.max(counter(KEYS[3]) + 1, seed, now_us - margin * 1000)
local field, exp = '-', now + ttl
if attempt then
  -- R1: the slot is in the fence, so permits in two slots never share
  -- one. R2: the counter is left to the confirmation.
  fence = slot_fence(fence, want, limit)
  field, exp = '~' .. attempt, now + tonumber(ARGV[13])
else
  -- The counter outlives every permit on the key (a release leaves it be).
  local life = math.max(ttl, math.ceil((fence - now_us) / 1000)) + margin
  redis.call('SET', KEYS[3], string.format('%.0f', fence), 'PX', math.max(life, redis.call('PTTL', KEYS[3])))
end
redis.call('HSET', KEYS[1], 'limit', ARGV[4])
local value = put(KEYS[1], KEYS[2], tostring(want), {exp = exp, digest = digest,
  field = field, fence = string.format('%.0f', fence), length = ARGV[2], owner = ARGV[3]}, now)
unqueue()
redis.call(ARGV[12], ARGV[11], '!acquired') -- for watchers (watch_sem.go)
return {1, value, want}
