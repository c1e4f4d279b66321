-- acquire.lua: take a free lock, or re-grant it to the token that holds it,
-- in the order waiters queued for it.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"; its value is
--          "<digest>:<fence>+<ms>:<owner>" (Redis; <ms> is the length the
--          lease was last granted or extended with, absent in values from
--          older gateways),
--          "<digest>:^<user>:<fence>:<owner>" (Redis, counted against a
--          user's quota; see "Counting") or
--          "<digest>:~<maker>:<fence>:<owner>" (Redlock, see ARGV[9]),
--          where Redlock's fence field becomes "<fence>++<ms>" once a
--          round confirmed the value (confirm.lua); every script that
--          rewrites the value keeps the mark (an older gateway reads
--          "+<ms>" as the length, and drops the mark)
-- KEYS[2]  the key's fence counter, "lockgw:{<key>}:fence"
-- KEYS[3]  the wait queue, "lockgw:{<key>}:queue": waiter ids by arrival (µs)
-- KEYS[4]  the waiters' heartbeats, "lockgw:{<key>}:alive": gateway id by
--          deadline (ms), refreshed by heartbeat.lua for all of a gateway's
--          waiters of the key
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  owner label (may be empty)
-- ARGV[4]  the fence margin in milliseconds: the counter lives until the
--          lease ends and Redis TIME has passed the fence, plus this margin
-- ARGV[5]  waiter ticket, "<gateway>.<id>", or "" for a caller that does
--          not wait
-- ARGV[6]  heartbeat in milliseconds: the tickets of a gateway not seen
--          again within it are dropped from the queue (the gateway died)
-- ARGV[7]  the key's notification channel, "lockgw:{<key>}:released"
-- ARGV[8]  fence seed in microseconds, or 0 to seed from Redis TIME. Redlock
--          passes the gateway's clock, so the nodes of one grant usually
--          agree on the fence and need no write-back round.
-- ARGV[9]  Redlock: this round's id, 22 characters of base64url; "" for
--          Redis. A value this round makes records it as its maker,
--          "~<id>", and lives ARGV[10] ms (provisional) until a round
--          confirms it (confirm.lua). A value of the same digest is a
--          renewal only once confirmed: then its expiry moves forward to
--          now + ARGV[2] (never back); an unconfirmed one is left as it is
--          (the round confirms it, or not). docs/safety.md, "The rules",
--          A(x).
-- ARGV[10] Redlock: the provisional TTL of a new value, ms; 0 for Redis
-- ARGV[11] Redis, per-user quotas (see "Counting" below): the caller's cap
--          on live locks; 0 counts nothing new. Always 0 on Redlock. When
--          the caller counts (ARGV[15] "1"; lockstore/redis/cluster_quota.go):
--          > 0 only records ARGV[12] as the lock's user in a new grant's
--          value; -1 says the caller's user is at its cap: everything
--          happens as usual (queueing, renewals, a held key is held) except
--          a new grant, refused with {4, 0}.
-- ARGV[12] the caller's user, escaped (no ":", "{" or "}"), as KEYS[5]
--          names it; "" without a quota
-- ARGV[13] how to tell waiters: PUBLISH, or on a Cluster SPUBLISH (sharded
--          pub/sub, Redis 7), so that the notification stays on this key's
--          shard; ARGV[7] shares the lock's hash tag, so a script may
-- ARGV[14] hold at least, ms (0: no): a new grant records its end T (now
--          plus this) ahead of the owner, "\1<T>:<owner>", which every script
--          that rewrites the value keeps; a release before T leaves the key
--          held until T (release.lua; docs/safety.md, rule L)
-- ARGV[15] "1": the users' quota sets are the caller's to keep (a Redis
--          Cluster, where they live in other slots than the lock's): the
--          script counts nothing and is passed no KEYS[5] or KEYS[6]
--          (see ARGV[11] for what the cap then says); "0": counted here,
--          in KEYS[5] and KEYS[6]
-- KEYS[5]  (absent without a quota, and on a Cluster, where a user's
--          quota set lives in another slot) the caller's quota set,
--          "lockgw:{quota:<user>}:locks"
-- KEYS[6]  (absent without a quota, as KEYS[5]) the quota set of the user
--          the caller believes the lock counts against, if the caller
--          already holds it (usually KEYS[5])
--
-- Returns
--   {1, value, expiry}  acquired: a new grant with a new fence; expiry is
--                     the lease's PEXPIRETIME (Unix ms) as this script left
--                     it: with value, what a release may delete at once
--                     (docs/safety.md, rule V3)
--   {2, value, expiry}  the same digest already held it: TTL reset, fence
--                     unchanged (a provisional Redlock value left as it
--                     is: {2, value}, no expiry)
--   {0, pttl, head}   not granted: held by another digest with pttl ms left,
--                     or free but promised to an earlier waiter (pttl 0);
--                     head is 1 when the caller is first in the queue
--   {3, user}         the same digest holds it, counted against user, whose
--                     set is not KEYS[6] (or none was passed): nothing
--                     changed; call again with that user's set as KEYS[6]
--   {4, ms}           not granted: the caller holds ARGV[11] live locks;
--                     the earliest of them expires in ms
--
-- Counting. A quota set holds the user's live locks, each lock's Redis key
-- scored by its expiry (ms, Redis TIME); only members whose expiry has not
-- passed count, so an expired lock frees its place without anyone calling
-- (the others are trimmed at the user's next grant). A lock granted under a cap records its user in its value,
-- "<digest>:^<user>:<fence>:<owner>", and every script that renews,
-- extends or deletes such a lock changes its user's set in the same step,
-- or changes nothing and names the user ({3, user} here). So the set and
-- the locks never disagree, whichever gateway or identity acts on the lock.
-- (The set and the lock hash to different Redis Cluster slots: on a
-- Cluster the caller counts in steps of its own, see ARGV[11] and
-- redis_cluster_quota.go.)
--
-- A free lock goes to the first waiter in the queue, never to a newcomer,
-- so waiters are granted in arrival order across every gateway sharing this
-- Redis. The fence is max(counter + 1, seed, TIME - margin), the seed being
-- Redis TIME in microseconds (or ARGV[8]), so a counter lost in a restart
-- without persistence, or expired, restarts above every fence handed out
-- before (unless the clock stepped back): a counter expires only once TIME
-- has passed it by the margin (docs/safety.md, "Fences").
local waiter = ARGV[5]
local publish = ARGV[13]
local apart = ARGV[15] == '1' -- quota sets are the caller's (a Cluster)
local attempt = ARGV[9]
if attempt == '' then
  attempt = nil
end
local ttl = tonumber(ARGV[2])

-- The user a value is counted against, or nil.
local function counted_user(value)
  if string.sub(value, 66, 66) ~= '^' then
    return nil
  end
  return string.match(value, '^[^:]*:%^([^:]*):')
end
-- Counts the lock in set until it expires (at ms, Redis TIME); the set
-- lives as long as its last lock.
local function count(set, at, now)
  redis.call('ZADD', set, string.format('%.0f', at), KEYS[1])
  if redis.call('PTTL', set) < at - now then
    redis.call('PEXPIRE', set, at - now)
  end
end
-- with_length is value with the length in its fence field ("<fence>",
-- "<fence>+<ms>" or, confirmed, "<fence>++<ms>") set to ms: the length an
-- extend without a TTL reuses. The confirmed mark is kept.
local function with_length(value, ms)
  local head, rest = string.sub(value, 1, 65), string.sub(value, 66)
  local c = string.sub(rest, 1, 1)
  if c == '~' or c == '^' then
    local f, r = string.match(rest, '^([^:]*:)(.*)$')
    head, rest = head .. f, r
  end
  local fence, plus, owner = string.match(rest, '^([^:+]*)(%+*)[^:]*:(.*)$')
  if plus ~= '++' then
    plus = '+'
  end
  return head .. fence .. plus .. ms .. ':' .. owner
end
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- lengthen moves key's expiry to max(expiry + 1 ms, now + ms) and returns
-- it (Unix ms): a renewal never shortens a lease, and always moves its
-- expiry forward, so a lease's value and expiry never repeat. A late
-- renewal cannot cut a lease an extend answered since, and a release or a
-- WAIT take-back that read the lease before a renewal finds it changed
-- (docs/safety.md, "Late writes on redis", rule V1). Redis 7.
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

-- dequeue takes a granted waiter's ticket out of the queue (and its
-- heartbeat, for an older gateway's); the heartbeats go with the last one.
local function dequeue(ticket)
  redis.call('ZREM', KEYS[3], ticket)
  redis.call('ZREM', KEYS[4], ticket)
  if redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('DEL', KEYS[4])
  end
end

local cur = redis.call('GET', KEYS[1])
if cur and string.sub(cur, 1, 64) == ARGV[1] then
  local user = counted_user(cur)
  if user and not apart and KEYS[6] ~= 'lockgw:{quota:' .. user .. '}:locks' then
    return {3, user}
  end
  if waiter ~= '' then
    dequeue(waiter)
  end
  -- Redlock: a round's value not confirmed yet ("~<maker>", no "++") is
  -- provisional, and only a confirmation makes it a lease (docs/safety.md,
  -- rule A): left as it is. Any other is a renewal, as on Redis.
  if attempt and string.match(cur, '^[^:]*:~') and not string.match(cur, '^[^:]*:~[^:]*:[^:+]*%+%+') then
    return {2, cur}
  end
  -- Recording the length needs memory; out of memory, the renewal
  -- still resets the TTL (PEXPIRE needs none) and keeps the old one.
  local value = with_length(cur, ARGV[2])
  if value ~= cur then
    local r = redis.pcall('SET', KEYS[1], value, 'KEEPTTL')
    if type(r) == 'table' and r.err then
      value = cur
    end
  end
  local at = lengthen(KEYS[1], ARGV[2])
  if user and not apart then
    count(KEYS[6], at, clock_ms())
  end
  redis.call(publish, ARGV[7], '!extended') -- for watchers (watch.go)
  return {2, value, at}
end

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A waiter's ticket is "<gateway>.<id>", and the heartbeats in KEYS[4] are
-- per gateway (heartbeat.lua refreshes them for all of a gateway's waiters
-- of this key at once). A ticket without "." is an older gateway's, with a
-- heartbeat of its own under its own name.
if redis.call('EXISTS', KEYS[4]) == 1 then
  -- Forget gateways (and older gateways' waiters) not refreshed in time.
  local dead = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms)
  if #dead > 0 then
    redis.call('ZREM', KEYS[3], unpack(dead))
    redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms)
  end
end
if waiter ~= '' then
  local heartbeat = tonumber(ARGV[6])
  redis.call('ZADD', KEYS[3], 'NX', tonumber(t[1]) * 1000000 + tonumber(t[2]), waiter)
  redis.call('ZADD', KEYS[4], now_ms + heartbeat, string.match(waiter, '^([^.]*)%.') or waiter)
  redis.call('PEXPIRE', KEYS[3], 2 * heartbeat)
  redis.call('PEXPIRE', KEYS[4], 2 * heartbeat)
end

-- The first ticket whose gateway is alive: the tickets of a gateway that
-- died go when they come first (at most 100 per call), so they never
-- hold up the line.
local head = nil
for _ = 1, 100 do
  head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not head or head == waiter then
    break
  end
  if redis.call('ZSCORE', KEYS[4], string.match(head, '^([^.]*)%.') or head) then
    break
  end
  redis.call('ZREM', KEYS[3], head)
  head = nil
end
if not head then -- more than 100 went: the rest go at the next call
  head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
local is_head = 0
if head and head == waiter then
  is_head = 1
end
if cur then
  return {0, redis.call('PTTL', KEYS[1]), is_head}
end
if head and head ~= waiter then
  return {0, 0, 0}
end

-- The count reads only: a script's first write is where Redis refuses it
-- when out of memory (after one, it lets the script finish), and that must
-- stay the fence's SET below.
local cap = 0
if not attempt then
  cap = tonumber(ARGV[11]) or 0
end
if apart and cap < 0 then
  return {4, 0}
end
local now_s = string.format('%.0f', now_ms)
-- At the cap, a lock the set still counts (a lease deleted without its set
-- by an older gateway) is not a second lock. The set's size bounds its live
-- count from above and costs a third of ZCOUNT: below the cap, that is
-- the answer.
if cap > 0 and not apart and redis.call('ZCARD', KEYS[5]) >= cap
    and redis.call('ZCOUNT', KEYS[5], now_s, '+inf') >= cap
    and tonumber(redis.call('ZSCORE', KEYS[5], KEYS[1]) or '0') < now_ms then
  local first = redis.call('ZRANGEBYSCORE', KEYS[5], now_s, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return {4, tonumber(first[2]) - now_ms}
end

local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local margin = tonumber(ARGV[4])
local seed = tonumber(ARGV[8]) or 0
if seed <= 0 then
  seed = now_us
end
local fence = math.max((tonumber(redis.call('GET', KEYS[2])) or 0) + 1, seed, now_us - margin * 1000)
-- The counter lives past the lease's end, and past the moment TIME reaches
-- the fence (a Redlock seed may be ahead of this clock), by the margin.
local ahead = math.ceil((fence - now_us) / 1000)
-- %.0f: tostring would print 1.7e+15 and lose digits; fences stay below 2^53.
fence = string.format('%.0f', fence)
redis.call('SET', KEYS[2], fence, 'PX', math.max(tonumber(ARGV[2]), ahead) + margin)

-- The fence field carries the lease's length, "<fence>+<ms>", which an
-- extend without a TTL reuses (extend.lua).
fence = fence .. '+' .. ARGV[2]
local owner = ARGV[3]
local at_least = tonumber(ARGV[14]) or 0
if at_least > 0 then
  owner = '\1' .. string.format('%.0f', now_ms + at_least) .. ':' .. owner
end
local value = ARGV[1] .. ':' .. fence .. ':' .. owner
local px = ARGV[2]
if attempt then
  value = ARGV[1] .. ':~' .. attempt .. ':' .. fence .. ':' .. owner
  px = ARGV[10]
elseif cap > 0 then
  value = ARGV[1] .. ':^' .. ARGV[12] .. ':' .. fence .. ':' .. owner
end
redis.call('SET', KEYS[1], value, 'NX', 'PX', px)
if cap > 0 and not apart then
  -- Forget the user's expired locks, then count this one.
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', '(' .. now_s)
  count(KEYS[5], now_ms + ttl, now_ms)
end
if waiter ~= '' then
  dequeue(waiter)
  -- Tell the next waiter it is first now, how long this lease is and
  -- whose it is ("<id>><ms>><digest>"), so that it can take over if this
  -- holder dies without a try of its own to learn when (script/notifier.go,
  -- Turn); a waiter of the holder's own token tries at once (a renewal).
  -- A ticket "<gateway>.~<id>" is of a gateway that reads that; one of an
  -- earlier version (a rolling upgrade), "<gateway>.<id>", knows only the
  -- plain "<id>", and tries when it hears it.
  local next = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if next and string.find(next, '.~', 1, true) then
    redis.call(publish, ARGV[7], next .. '>' .. px .. '>' .. ARGV[1])
  elseif next then
    redis.call(publish, ARGV[7], next)
  end
end
-- Tell watchers (watch.go) of the new holder; waiters ignore the message.
redis.call(publish, ARGV[7], '!acquired')
return {1, value, redis.call('PEXPIRETIME', KEYS[1])}
