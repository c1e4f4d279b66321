-- sem_discard.lua: Redlock only. Take a failed acquire round out of the
-- permit it joined or wrote on this node, as discard.lua does for a lock.
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set
-- ARGV[1]  SHA-256 of the token   ARGV[2]  the failed round's attempt id
-- ARGV[3]  the notification channel
--
-- Returns 1 deleted, 2 the round left and others still hold the permit,
-- 0 nothing of this round's here (pinned included).
local now = clock()
open(KEYS[1], KEYS[2], now)
local slot, p = mine(KEYS[1], ARGV[1], now)
if not slot or string.sub(p.field, 1, 1) ~= '~' then
  return 0
end
local left, found = {}, false
for id in string.gmatch(string.sub(p.field, 2), '[^.]+') do
  if id == ARGV[2] then
    found = true
  else
    left[#left + 1] = id
  end
end
if not found then
  return 0
end
if #left > 0 then
  p.field = '~' .. table.concat(left, '.')
  put(KEYS[1], KEYS[2], slot, p, now)
  return 2
end
drop(KEYS[1], KEYS[2], slot, p.digest)
redis.call('PUBLISH', ARGV[3], '*')
return 1
