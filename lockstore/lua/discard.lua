-- discard.lua: Redlock only. Take a failed acquire round out of the rounds
-- that hold a lease on this node, and delete the lease when no round holds
-- it any more.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"; its value is
--          "<digest>:<field>:<fence>:<owner>", the field as acquire.lua
--          writes it: "~<id1>.<id2>…" or "~!<id>" (pinned)
-- KEYS[2]  the wait queue, "lockgw:{<key>}:queue"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  the failed round's attempt id
-- ARGV[3]  the key's notification channel, "lockgw:{<key>}:released"
-- ARGV[4]  (optional) how to tell the next waiter, as in release.lua;
--          absent: PUBLISH. Redlock's nodes are single servers, so it
--          passes none.
--
-- Returns
--   1  the round was the last one holding the lease: deleted
--   2  the round left; other rounds still hold the lease, which stays
--   0  nothing of this round's here (never landed, already gone, another
--      token's, or pinned): nothing changed
--
-- A round that reported a grant never runs this, so its membership keeps
-- the lease alive on this node until the token releases it or it expires;
-- a failed round that took over the token's lease cannot delete it from
-- under a round that succeeded.
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 64) ~= ARGV[1] or string.sub(cur, 66, 66) ~= '~' then
  return 0
end
local field, rest = string.match(string.sub(cur, 67), '^([^:]*):(.*)$')
local left = {}
local found = false
for id in string.gmatch(field, '[^.]+') do
  if id == ARGV[2] then
    found = true
  else
    left[#left + 1] = id
  end
end
if not found then
  return 0 -- includes a pinned field, "!<id>"
end
if #left > 0 then
  redis.call('SET', KEYS[1], ARGV[1] .. ':~' .. table.concat(left, '.') .. ':' .. rest, 'KEEPTTL')
  return 2
end
redis.call('DEL', KEYS[1])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call(ARGV[4] or 'PUBLISH', ARGV[3], head or '*')
return 1
