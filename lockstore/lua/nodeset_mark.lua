-- nodeset_mark.lua: write or remove a node's marker, the node list it
-- serves (docs/safety.md, "Changing the node list"; redlock_set.go).
--
-- KEYS[1]  the marker, "lockgw:redlock:set"
-- ARGV[1]  the caller's node list, canonical
-- ARGV[2]  "mark": set the marker to ARGV[1] if there is none;
--          "unmark": delete it if it is ARGV[1]
--
-- Returns the marker found before, "" when there was none.
local have = redis.call('GET', KEYS[1])
if ARGV[2] == 'mark' and not have then
  redis.call('SET', KEYS[1], ARGV[1])
elseif ARGV[2] == 'unmark' and have == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return have or ''
