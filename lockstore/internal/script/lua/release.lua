-- release.lua: delete a lock the caller holds, and wake the next waiter.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"
-- KEYS[2]  the wait queue, "lockgw:{<key>}:queue"
-- KEYS[3]  the key's fence counter, "lockgw:{<key>}:fence"
-- KEYS[4]  the key's forced releases, "lockgw:{<key>}:forced": a sorted
--          set, a forced-out lease's digest → when that lease would have
--          ended (Unix ms, this node's clock); written by ARGV[9] only,
--          read by extend.lua
-- KEYS[5]  (absent without a quota) Redis only: the quota set of the user
--          the caller believes the lock counts against,
--          "lockgw:{quota:<user>}:locks" (see acquire.lua, "Counting")
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  the key's notification channel, "lockgw:{<key>}:released"
-- ARGV[3]  the fence margin in milliseconds (see acquire.lua): the lease is
--          over, so the counter now lives until Redis TIME has passed it,
--          plus this margin
-- ARGV[4]  how to tell the next waiter: "PUBLISH", or "SPUBLISH" on a Redis
--          Cluster (sharded pub/sub, Redis 7: the notification stays on
--          this key's shard; ARGV[2] shares the lock's hash tag)
-- ARGV[5]  the lock's value as the caller read it a moment before
--          (inspect.lua)
-- ARGV[6]  the lock's expiry as read with it, Unix ms (PEXPIRETIME)
-- ARGV[7]  "1": honour the lease's hold-at-least end T (acquire.lua, ARGV[14]):
--          before T, leave a lingering value, the value with its digest's
--          first character replaced by "L", until T, in place of deleting
--          (docs/safety.md, rule L); "0" (a failed Redlock round's clean-up:
--          never answered as a grant): delete
-- ARGV[8]  (with ARGV[7] "1") linger at least this many ms from now, T or
--          no T: Redlock's longest hold-at-least left among the nodes its
--          release read, so that a node whose copy lacks the grant's T
--          (a renewal wrote it there) keeps the key too; "0" or absent:
--          only T
-- ARGV[9]  "1": a forced release (lockstore.Forcer; ARGV[1] is the digest
--          its read found): once the lease is deleted, KEYS[4] records
--          its digest until the lease's expiry as read (ARGV[6]), never
--          longer, so the holder's next renewal learns why it ended
--          (extend.lua; docs/safety.md, "Forced releases"); "0" or
--          absent: nothing more
-- ARGV[10] "1": the users' quota sets are the caller's to keep (a Redis
--          Cluster, where they live in other slots than the lock's): the
--          caller passes no quota set and is answered a counted lock's
--          user ({1, user}); "0": the lock's user's set, the last of the
--          KEYS, is changed here
--
-- deadline.lua runs first (rule D of docs/safety.md, "Late grants and late
-- deletes"): the caller appends its deadline after these arguments, and a
-- release that lands after the gateway may have answered 503 for it, or on
-- another server than the one meant (a slot that moved, a failover),
-- writes nothing. So no release removes what a request sent after its
-- answer wrote; a pair read on one server can come back on another.
--
-- A release deletes only the lease it read: the same value and the same
-- expiry. Every write to a lease on this server changes one of them (a
-- renewal or extend moves the expiry forward, a new grant has a new fence;
-- on Redlock an acquire round that takes the lease over changes its
-- attempt field), so a release concurrent with later writes of the token
-- deletes nothing they wrote (docs/safety.md, "Late writes on redis", rule
-- V2, and Lemma 1 for Redlock).
--
-- Returns
--   1   released
--   0   not held (never taken, released, or expired)
--   -1  held by another digest; left as it is
--   -2  held by the same digest, but not as read (ARGV[5], ARGV[6]): a
--       write changed it since; left as it is (read again)
--   {-3, user}  the lock counts against user, whose set is not KEYS[5] (or
--       none was passed); left as it is: call again with that user's set
--   {1, user}  with ARGV[10] "1" (a Cluster, where a quota set lives in
--       another slot and no KEYS[5] is passed): released; the lock counted
--       against user, and the caller takes it out of that user's set
--
-- Only the first waiter is told (the message is its id), so a release costs
-- one wake-up, not one per waiter. With nobody queued the message is "*",
-- for waiters without a queue (Redlock's); with nobody listening, a publish
-- costs next to nothing.
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
if string.sub(cur, 1, 1) == 'L' and string.sub(cur, 2, 64) == string.sub(ARGV[1], 2) then
  return 0 -- the token's own lingering value: released already
end
if string.sub(cur, 1, 64) ~= ARGV[1] then
  return -1
end
local apart = ARGV[10] == '1' -- quota sets are the caller's (a Cluster)
local user = nil
if string.sub(cur, 66, 66) == '^' then
  user = string.match(cur, '^[^:]*:%^([^:]*):')
  if not apart and KEYS[5] ~= 'lockgw:{quota:' .. user .. '}:locks' then
    return {-3, user}
  end
end
if cur ~= ARGV[5] or redis.call('PEXPIRETIME', KEYS[1]) ~= tonumber(ARGV[6]) then
  return -2
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ms = ARGV[7] == '1' and tonumber(string.match(cur, ':\1(%d+):') or '0') or 0
if ARGV[7] == '1' and (tonumber(ARGV[8] or '0') or 0) > 0 then
  until_ms = math.max(until_ms, now_ms + tonumber(ARGV[8]))
end
if until_ms > now_ms then
  redis.call('SET', KEYS[1], 'L' .. string.sub(cur, 2), 'PX', string.format('%.0f', until_ms - now_ms))
else
  redis.call('DEL', KEYS[1])
end
if ARGV[9] == '1' and tonumber(ARGV[6]) > now_ms then
  -- The tombstone: the forced-out digest until its lease's end as read.
  -- The set lives as long as its latest entry (never shortened); entries
  -- past their end are dropped here, and extend.lua ignores them.
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_ms)
  redis.call('ZADD', KEYS[4], ARGV[6], ARGV[1])
  local ttl = redis.call('PTTL', KEYS[4])
  local left = tonumber(ARGV[6]) - now_ms
  if ttl < left then
    redis.call('PEXPIRE', KEYS[4], left)
  end
end
if user and not apart then
  redis.call('ZREM', KEYS[5], KEYS[1])
end
local counter = tonumber(redis.call('GET', KEYS[3]))
if counter then
  local ahead = math.ceil((counter - (tonumber(t[1]) * 1000000 + tonumber(t[2]))) / 1000)
  redis.call('PEXPIRE', KEYS[3], math.max(ahead, 0) + tonumber(ARGV[3]))
end
if until_ms <= now_ms then -- a lingering value keeps everyone out: nobody to wake
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  redis.call(ARGV[4], ARGV[2], head or '*')
end
if user and apart then
  return {1, user}
end
return 1
