-- deadline.lua: the first lines of the scripts that grant or delete
-- (acquire.lua, sem_acquire.lua, confirm.lua, sem_confirm.lua, release.lua,
-- sem_release.lua, unwait.lua, sem_unwait.lua, uncount.lua: script.Sources),
-- rule D of docs/safety.md ("Late grants and late deletes"): a call that
-- runs after the gateway may have answered 503 for it, or on another server
-- than the one it was meant for, writes nothing.
-- The caller appends, after the script's own arguments:
--
-- ARGV[#ARGV]  "<run id>:<µs>": the run id of the server whose clock the
--              gateway sampled (clock.lua), and a time by that clock which
--              has passed before the gateway can answer 503 for this call
--
-- The gateway calls these scripts as functions of one library where the
-- server takes one (script/functions.go): there the run id's read below goes
-- through a local the process fills once ("The run id, read once per
-- process" in docs/safety.md); the line must stay as it is, the library
-- finds it by its text.
--
-- It is taken off ARGV here, so the script proper sees its own. Returns,
-- after changing nothing: on another server (a failover, a restart, a
-- Cluster slot that moved), the error "LOCKGW_CLOCK" (the gateway samples
-- again and calls once more); at or past the deadline, the error
-- "LOCKGW_LATE".
local deadline_run, deadline_us = string.match(table.remove(ARGV), '^(%x+):(%d+)$')
if string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') ~= deadline_run then
  return redis.error_reply('LOCKGW_CLOCK the call was meant for another Redis server (a failover, a restart or a moved slot)')
end
local deadline_now = redis.call('TIME')
if tonumber(deadline_now[1]) * 1000000 + tonumber(deadline_now[2]) >= tonumber(deadline_us) then
  return redis.error_reply('LOCKGW_LATE the call reached Redis after its deadline and wrote nothing')
end
