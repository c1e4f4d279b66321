-- sem_raise.lua: Redlock only. Make a permit's fence F known to a node of
-- the majority that granted it, as raise_fence.lua does for a lock.
--
-- KEYS[1]  the permits hash   KEYS[2]  the expiry set   KEYS[3]  the fence counter
-- ARGV[1]  SHA-256 of the token   ARGV[2]  the round's attempt id
-- ARGV[3]  F                      ARGV[4]  the fence margin in ms
-- ARGV[5]  the slot
-- ARGV[6]  "1" when F is the fence the token's permit kept (a majority
--          re-granted it): the value takes F, the counter is left alone
--          (it is past F already, and F is that permit's own)
--
-- Returns {1} when the round still holds the slot here and the node's
-- counter is below F (it is raised to F, set by this token) or is F, set
-- by this token (this round, or a twin: the same permit): the slot's value
-- now carries F, marked confirmed ("<F>+0<ms>", sem_common.lua). A value
-- that carries F already is no exception: it may be what is left on this
-- node of a permit the token released, with another token's permit granted
-- since (docs/safety.md, "Semaphores", Fences). {2, c, mine} when the counter c is past F (or is
-- F, set by another token): nothing changed; mine is 1 when this token
-- set c (a twin raised its fence to c). {0} when the round no longer
-- holds the slot here: nothing changed.
--
-- Unlike a lock's write-back, this one refuses a counter already at or
-- past F that another token set: permits of one key are granted at the
-- same time, on majorities that share a node, and two of them must not
-- confirm one fence. Two permits confirmed with fence F are each
-- confirmed on a majority; on a node of both, the second confirmation
-- would find the counter at F or past it, set by the first token. (A
-- round whose own vote was F is confirmed by that vote: it set the
-- counter.)
local now, now_us = clock()
open(KEYS[1], KEYS[2], now)
local p = parse(redis.call('HGET', KEYS[1], ARGV[5]))
if not p or p.digest ~= ARGV[1] or string.sub(p.field, 1, 1) ~= '~' or string.sub(p.field, 2, 2) == '!' then
  return {0}
end
local found = false
for id in string.gmatch(string.sub(p.field, 2), '[^.]+') do
  if id == ARGV[2] then
    found = true
  end
end
if not found then
  return {0}
end
local f = tonumber(ARGV[3])
local c, by = counter(KEYS[3])
-- confirm writes F into the value, marked confirmed: a retry after the
-- answer prefers it to this token's votes that land late, above F.
local function confirm()
  p.fence, p.confirmed = ARGV[3], true
  put(KEYS[1], KEYS[2], ARGV[5], p, now)
end
if ARGV[6] == '1' then
  confirm()
  return {1}
end
if c > f or (c == f and by ~= ARGV[1]) then
  local mine = 0
  if by == ARGV[1] then
    mine = 1
  end
  return {2, c, mine}
end
confirm()
if c < f then
  local ahead = math.ceil((f - now_us) / 1000)
  local life = math.max(p.exp - now, ahead) + tonumber(ARGV[4])
  redis.call('SET', KEYS[3], ARGV[3] .. ':' .. ARGV[1], 'PX', math.max(life, redis.call('PTTL', KEYS[3])))
end
return {1}
