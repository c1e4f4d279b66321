-- nodeset.lua: the first lines of every Redlock script that grants or
-- lengthens (acquire, extend, confirm, sem_acquire, sem_extend,
-- sem_confirm); redlock_set.go prepends it and appends, after the script's
-- own keys and arguments:
--
-- KEYS[#KEYS-1]  the node's marker, "lockgw:redlock:set": the node list
--                this node serves (docs/safety.md, "Changing the node list")
-- KEYS[#KEYS-1]  the node's quarantine, "lockgw:redlock:quarantine", written
--                when the node was found without a marker (it lost its data;
--                docs/safety.md, "Restarted nodes", rule Q)
-- KEYS[#KEYS]    the longest LOCKGW_MAX_TTL of a gateway that marked or read
--                the node, "lockgw:redlock:maxttl" (nodeset_mark.lua)
-- ARGV[#ARGV-2]  the caller's node list, canonical: sorted "host:port/db"
--                names joined by ","; a transition gateway's is "O>N", its
--                previous list and its new one (docs/safety.md, rule T)
-- ARGV[#ARGV-1]  a second marker the caller accepts: a transition
--                gateway's new list N; "" for others
-- ARGV[#ARGV]    the caller's LOCKGW_MAX_TTL, ms: the node must know a
--                longest lease at least this long, so that a quarantine or a
--                settle key written later on it outlives what it votes for
--                now (rule T)
--
-- These are taken off KEYS and ARGV here, so the script proper sees its own.
-- Returns, after changing nothing: when the marker is absent or another
-- list (or neither of the two a transition gateway accepts), the error
-- "LOCKGW_NODESET <marker>" (<marker> empty when absent);
-- while the node is quarantined, "LOCKGW_QUARANTINE <ms left>"; while it
-- knows a shorter longest lease than the caller's, "LOCKGW_MAXTTL <ms>"
-- (the caller records its own, nodeset_mark.lua, and calls again). Every
-- error has a space: Redis puts "ERR" in front of a one-word error.
local nodeset_maxttl_key = table.remove(KEYS)
local nodeset_quarantine = table.remove(KEYS)
local nodeset_key = table.remove(KEYS)
local nodeset_maxttl = tonumber(table.remove(ARGV))
local nodeset_also = table.remove(ARGV)
local nodeset_list = table.remove(ARGV)
local nodeset_have = redis.call('GET', nodeset_key)
if nodeset_have ~= nodeset_list and (nodeset_also == '' or nodeset_have ~= nodeset_also) then
  return redis.error_reply('LOCKGW_NODESET ' .. (nodeset_have or ''))
end
local nodeset_known = tonumber(redis.call('GET', nodeset_maxttl_key)) or 0
if nodeset_known < nodeset_maxttl then
  return redis.error_reply('LOCKGW_MAXTTL ' .. nodeset_known)
end
local nodeset_left = redis.call('PTTL', nodeset_quarantine)
if nodeset_left ~= -2 then
  return redis.error_reply('LOCKGW_QUARANTINE ' .. nodeset_left)
end
