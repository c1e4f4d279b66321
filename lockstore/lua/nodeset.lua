-- nodeset.lua: the first lines of every Redlock script that grants or
-- lengthens (acquire, extend, raise_fence, sem_acquire, sem_extend,
-- sem_raise); redlock_set.go prepends it and appends, after the script's
-- own keys and arguments:
--
-- KEYS[#KEYS]  the node's marker, "lockgw:redlock:set": the node list this
--              node serves (docs/safety.md, "Changing the node list")
-- ARGV[#ARGV]  the caller's node list, canonical: sorted "host:port/db"
--              names joined by ","
--
-- Both are taken off KEYS and ARGV here, so the script proper sees its own.
-- Returns, when the marker is absent or another list, after changing
-- nothing: the error "LOCKGW_NODESET <marker>" (<marker> empty when absent).
local nodeset_key = table.remove(KEYS)
local nodeset_list = table.remove(ARGV)
local nodeset_have = redis.call('GET', nodeset_key)
if nodeset_have ~= nodeset_list then
  return redis.error_reply('LOCKGW_NODESET ' .. (nodeset_have or ''))
end
