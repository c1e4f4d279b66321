-- sem_discard.lua: Redlock only. Withdraw a failed acquire round's
-- provisional value, as discard.lua does for a lock (docs/safety.md, W):
-- liveness only.
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set
-- ARGV[1]  SHA-256 of the token   ARGV[2]  the failed round's id
-- ARGV[3]  the notification channel
--
-- Returns 1 the digest's value was this round's and unconfirmed: deleted;
-- 0 anything else (gone, another round's, or confirmed: a twin round made
-- it a permit): nothing changed.
local now = clock()
open(KEYS[1], KEYS[2], now)
local slot, p = mine(KEYS[1], ARGV[1], now)
if not slot or p.confirmed or maker(p) ~= ARGV[2] then
  return 0
end
drop(KEYS[1], KEYS[2], slot, p.digest)
redis.call('PUBLISH', ARGV[3], '*')
return 1
