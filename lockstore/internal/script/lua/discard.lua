-- discard.lua: Redlock only. Withdraw a failed acquire round's provisional
-- value, so that other rounds need not wait for it to expire
-- (docs/safety.md, "The rules", W(x)). Liveness only: nothing in the
-- safety argument needs it to run, ever.
--
-- KEYS[1]  the lock, "lockgw:{<key>}:lock"; its value is
--          "<digest>:~<maker>:<fence>[+|++]<ms>:<owner>" (acquire.lua)
-- KEYS[2]  the wait queue, "lockgw:{<key>}:queue"
-- ARGV[1]  SHA-256 of the token, 64 lowercase hex digits
-- ARGV[2]  the failed round's id
-- ARGV[3]  the key's notification channel, "lockgw:{<key>}:released"
--
-- Returns
--   1  the value was this round's and unconfirmed: deleted
--   0  anything else (gone, another token's, another round's, or
--      confirmed: a twin round made it a lease): nothing changed
local cur = redis.call('GET', KEYS[1])
if not cur or string.sub(cur, 1, 64) ~= ARGV[1] then
  return 0
end
local maker, plus = string.match(string.sub(cur, 66), '^~([^:]*):[^:+]*(%+*)')
if maker ~= ARGV[2] or plus == '++' then
  return 0
end
redis.call('DEL', KEYS[1])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
redis.call('PUBLISH', ARGV[3], head or '*')
return 1
