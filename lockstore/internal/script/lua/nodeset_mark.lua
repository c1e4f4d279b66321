-- nodeset_mark.lua: read, write or remove a node's marker, the node list
-- it serves (docs/safety.md, "Changing the node list", rules W and T;
-- redlock_set.go). A marker is committed, the list L (the only value
-- nodeset.lua lets a gateway with list L run under), tentative, "?L",
-- which expires by itself, or a transition, "O>N", from list O to list N,
-- under which only transition gateways run.
--
-- KEYS[1]  the marker, "lockgw:redlock:set"
-- KEYS[2]  the node's quarantine, "lockgw:redlock:quarantine" (nodeset.lua)
-- KEYS[3]  the node's settle key, "lockgw:redlock:settle": lives the
--          longest lease plus drift after the node stopped serving O
--          (rule T)
-- KEYS[4]  the longest LOCKGW_MAX_TTL of the gateways that marked or read
--          the node, ms, "lockgw:redlock:maxttl": every op raises it to
--          ARGV[8]; quarantines and settle keys last at least it plus drift,
--          whichever gateway writes them (nodeset.lua lets a gateway vote
--          only on a node that knows its own)
-- ARGV[1]  the caller's node list L (a transition gateway's new list N),
--          canonical
-- ARGV[2]  "read":   nothing changes;
--          "try":    set "?L" (PX ARGV[3]) if there is no marker;
--          "commit": set L if the marker is "?L";
--          "join":   set L if there is no marker, or it is "?L"; with no
--                    marker at all the node lost its data (or is new):
--                    quarantine it for ARGV[4] ms (docs/safety.md,
--                    "Restarted nodes", rule Q);
--          "unmark": delete it if it is "?L" (a losing fresh pass's own);
--          "begin":  (rule T) set "O>N" where the marker is O and the node
--                    is in O, or where there is none (then quarantined as
--                    by "join"); a node of O gets the settle key too;
--          "finish": (rule T) set N where the marker is "O>N"
-- ARGV[3]  "try": how long a tentative marker lives, ms
-- ARGV[4]  "join", "begin": how long a node found without a marker is
--          quarantined, ms: the longest lease plus drift (0: no quarantine,
--          the restart guards off, for tests' controls)
-- ARGV[5]  "begin", "finish": the previous list O, canonical ("" otherwise)
-- ARGV[6]  "begin": "1" when the node is in O
-- ARGV[7]  "begin": how long the settle key lives, ms: the longest lease
--          plus drift
-- ARGV[8]  the caller's LOCKGW_MAX_TTL, ms
--
-- Returns {the marker found before ("" when none), the settle key's PTTL
-- as found (-2 when absent)}.
local have = redis.call('GET', KEYS[1])
local settle = redis.call('PTTL', KEYS[3])
local list, op = ARGV[1], ARGV[2]
local tentative = '?' .. list
local known = tonumber(redis.call('GET', KEYS[4])) or 0
if known < tonumber(ARGV[8]) then
  known = tonumber(ARGV[8])
  redis.call('SET', KEYS[4], ARGV[8])
end
-- The longest lease any gateway of this node may have granted, plus drift.
local longest = known + math.floor(known / 100) + 2
-- A node without a marker lost its data (or is new): rule Q.
local function quarantine_if_lost()
  if not have and tonumber(ARGV[4]) > 0 then
    redis.call('SET', KEYS[2], '1', 'PX', math.max(tonumber(ARGV[4]), longest))
  end
end
if op == 'try' and not have then
  redis.call('SET', KEYS[1], tentative, 'PX', ARGV[3])
elseif op == 'commit' and have == tentative then
  redis.call('SET', KEYS[1], list)
elseif op == 'join' and (not have or have == tentative) then
  quarantine_if_lost()
  redis.call('SET', KEYS[1], list)
elseif op == 'unmark' and have == tentative then
  redis.call('DEL', KEYS[1])
elseif op == 'begin' and (not have or (have == ARGV[5] and ARGV[6] == '1')) then
  quarantine_if_lost()
  if ARGV[6] == '1' then
    redis.call('SET', KEYS[3], '1', 'PX', math.max(tonumber(ARGV[7]), longest))
  end
  redis.call('SET', KEYS[1], ARGV[5] .. '>' .. list)
elseif op == 'finish' and have == ARGV[5] .. '>' .. list then
  redis.call('SET', KEYS[1], list)
end
return {have or '', settle}
