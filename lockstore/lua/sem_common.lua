-- sem_common.lua: what every semaphore script starts with (the Go side
-- prepends it to each sem_*.lua).
--
-- A semaphore of limit L is L slots, each an ordinary lease; all its Redis
-- keys share the hash tag {sem:<key>}, so one script sees them all (on a
-- Cluster too):
--
--   lockgw:{sem:<key>}:permits  a hash: "limit" → the limit the holders
--                               were granted under; "<slot>" (1 … L) → the
--                               slot's permit,
--                               "<expiry ms>:<digest>:<field>:<fence>+<ms>:<owner>"
--                               expiry in Redis TIME, field "-" (Redis) or
--                               a Redlock attempt field as in acquire.lua
--                               ("~<id1>.<id2>…", "~!<id>" pinned)
--   lockgw:{sem:<key>}:fence    the fence counter, as for locks
--   lockgw:{sem:<key>}:queue    waiters by arrival (Redis only), and
--   lockgw:{sem:<key>}:alive    their heartbeats, as for locks
--
-- Why a hash of slots rather than a sorted set of permits: the slot is
-- what makes Redlock safe (docs/safety.md, "Semaphores"): each slot is a
-- lease that at most one token holds on a majority, so at most L tokens
-- hold permits. Redis uses the same layout, so both run the same scripts.
-- A slot's expiry lives in its value and is checked against TIME by every
-- script (an expired slot is dropped at once), which is what PX does for
-- a lock; the hash's own TTL is raised to outlive its longest permit, so
-- an idle semaphore leaves nothing behind. Only held slots are stored:
-- every script costs O(holders), finding a free slot O(limit).

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
    tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- load reads the semaphore at hash as of now (ms), deleting expired
-- permits. It returns the recorded limit (nil when none), the permits by
-- slot ({exp, digest, field, fence, length, owner, value}) and how many.
local function load(hash, now)
  local all = redis.call('HGETALL', hash)
  local limit, permits, n, expired = nil, {}, 0, {}
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == 'limit' then
      limit = tonumber(v)
    else
      local exp, digest, field, fence, length, owner =
        string.match(v, '^(%d+):(%x+):([^:]*):(%d+)%+(%d+):(.*)$')
      if exp and tonumber(exp) > now then
        permits[tonumber(f)] = {exp = tonumber(exp), digest = digest, field = field,
          fence = fence, length = length, owner = owner, value = v}
        n = n + 1
      else
        expired[#expired + 1] = f
      end
    end
  end
  if #expired > 0 then
    redis.call('HDEL', hash, unpack(expired))
  end
  return limit, permits, n
end

-- mine finds digest's slot.
local function mine(permits, digest)
  for slot, p in pairs(permits) do
    if p.digest == digest then
      return slot, p
    end
  end
  return nil, nil
end

local function encode(p)
  return string.format('%.0f', p.exp) .. ':' .. p.digest .. ':' .. p.field .. ':' ..
    p.fence .. '+' .. p.length .. ':' .. p.owner
end

-- outlive raises key's TTL to at least ms (never lowers it); a key
-- without one (just made) gets one.
local function outlive(key, ms)
  local p = redis.call('PTTL', key)
  if p == -1 or (p >= 0 and p < ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- earliest and latest: ms until the first and the last permit expires.
local function earliest(permits, now)
  local d = nil
  for _, p in pairs(permits) do
    if not d or p.exp - now < d then
      d = p.exp - now
    end
  end
  return d or 0
end
local function latest(permits, now)
  local d = 0
  for _, p in pairs(permits) do
    d = math.max(d, p.exp - now)
  end
  return d
end
