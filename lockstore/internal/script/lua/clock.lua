-- clock.lua: a sample of this server's clock for rule D (docs/safety.md,
-- "Late grants"; deadline.lua checks it). Writes nothing.
--
-- KEYS[1]  a key the grants will name (on a Cluster, it routes the sample
--          to the node serving that key's slot); not read
--
-- Returns {run id, seconds, microseconds}: the server's run id (INFO
-- server) and its TIME.
local t = redis.call('TIME')
return {string.match(redis.call('INFO', 'server'), 'run_id:(%x+)'), tonumber(t[1]), tonumber(t[2])}
