-- nodeset_mark.lua: read, write or remove a node's marker, the node list
-- it serves (docs/safety.md, "Changing the node list", rule W;
-- redlock_set.go). A marker is committed, the list L (the only value
-- nodeset.lua lets a script run under), or tentative, "?L", which expires
-- by itself.
--
-- KEYS[1]  the marker, "lockgw:redlock:set"
-- ARGV[1]  the caller's node list L, canonical
-- ARGV[2]  "read":   nothing changes;
--          "try":    set "?L" (PX ARGV[3]) if there is no marker;
--          "commit": set L if the marker is "?L";
--          "join":   set L if there is no marker, or it is "?L";
--          "unmark": delete it if it is "?L" (a losing fresh pass's own)
-- ARGV[3]  "try": how long a tentative marker lives, ms
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
  redis.call('SET', KEYS[1], list)
elseif op == 'unmark' and have == tentative then
  redis.call('DEL', KEYS[1])
end
return have or ''
