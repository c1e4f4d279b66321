-- nodeset_mark.lua: read, write or remove a node's marker, the node list
-- it serves (docs/safety.md, "Changing the node list", rule W;
-- redlock_set.go). A marker is committed, the list L (the only value
-- nodeset.lua lets a script run under), or tentative, "?L", which expires
-- by itself.
--
-- KEYS[1]  the marker, "lockgw:redlock:set"
-- KEYS[2]  the node's quarantine, "lockgw:redlock:quarantine" (nodeset.lua)
-- ARGV[1]  the caller's node list L, canonical
-- ARGV[2]  "read":   nothing changes;
--          "try":    set "?L" (PX ARGV[3]) if there is no marker;
--          "commit": set L if the marker is "?L";
--          "join":   set L if there is no marker, or it is "?L"; with no
--                    marker at all the node lost its data (or is new):
--                    quarantine it for ARGV[4] ms (docs/safety.md,
--                    "Restarted nodes", rule Q);
--          "unmark": delete it if it is "?L" (a losing fresh pass's own)
-- ARGV[3]  "try": how long a tentative marker lives, ms
-- ARGV[4]  "join": how long a node found without a marker is quarantined,
--          ms: the longest lease plus drift (0: no quarantine, the
--          restart guards off, for tests' controls)
--
-- Returns the marker found before, "" when there was none.
local have = redis.call('GET', KEYS[1])
local list, op = ARGV[1], ARGV[2]
local tentative = '?' .. list
if op == 'try' and not have then
  redis.call('SET', KEYS[1], tentative, 'PX', ARGV[3])
elseif op == 'commit' and have == tentative then
  redis.call('SET', KEYS[1], list)
elseif op == 'join' and (not have or have == tentative) then
  if not have and tonumber(ARGV[4]) > 0 then
    redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
  end
  redis.call('SET', KEYS[1], list)
elseif op == 'unmark' and have == tentative then
  redis.call('DEL', KEYS[1])
end
return have or ''
