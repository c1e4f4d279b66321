-- sem_common.lua: what every semaphore script starts with (the Go side
-- prepends it to each sem_*.lua).
--
-- A semaphore of limit L is L slots, each an ordinary lease; all its Redis
-- keys share the hash tag {sem#<key>}, so one script sees them all (on a
-- Cluster too):
--
--   lockgw:{sem#<key>}:permits  a hash: "limit" → the limit the holders
--                               were granted under; "<slot>" → the slot's
--                               permit, "<expiry ms>:<digest>:<field>:<fence>+<ms>:<owner>"
--                               (expiry in Redis TIME; field "-" on Redis,
--                               on Redlock "~<maker>", the round that
--                               made the value, as in acquire.lua (an
--                               older gateway's "~<id1>.<id2>…" was made
--                               by id1, a pinned "~!<id>" by nobody);
--                               "+0<ms>" once a round confirmed the fence,
--                               sem_confirm.lua: an older gateway reads
--                               the same length);
--                               "t:<digest>" → the digest's slot; "seq"
--                               (Redis) → the last slot number handed out
--   lockgw:{sem#<key>}:expiry   a sorted set: slot → its expiry (ms)
--   lockgw:{sem#<key>}:fence    the fence counter, as for locks; on
--                               Redlock only confirmations raise it
--                               (sem_confirm.lua); an older gateway's
--                               reads "<fence>:<digest>"
--   lockgw:{sem#<key>}:queue    waiter tickets by arrival (Redis only), and
--   lockgw:{sem#<key>}:alive    their gateways' heartbeats, as a lock's
--                               (see "The wait queue" below)
--
-- Why slots rather than a plain sorted set of permits: the slot is what
-- makes Redlock safe (docs/safety.md, "Semaphores"): each slot is a lease
-- that at most one token holds on a majority, so at most L tokens hold
-- permits. Redis runs the same scripts; there only the count matters, so
-- a Redis grant takes a fresh slot number (past every Redlock slot) rather
-- than searching for a free one. A slot's expiry is checked against TIME
-- by every script, which drops expired slots first, as PX would; the
-- sorted set makes that, the count and the next expiry O(log n), and the
-- "t:" index finds a token's slot at once, so no operation but GET reads
-- every permit. The keys' TTLs are raised to outlive their longest permit,
-- so an idle semaphore leaves nothing behind.

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000),
    tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- batched calls cmd on key with args, at most 1000 at a time (Lua's
-- unpack has a limit).
local function batched(cmd, key, args)
  for i = 1, #args, 1000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
  end
end

local function parse(v)
  if not v then
    return nil
  end
  local exp, digest, field, fence, mark, length, owner =
    string.match(v, '^(%d+):(%x+):([^:]*):(%d+)%+(0?)(%d+):(.*)$')
  if not exp then
    return nil
  end
  return {exp = tonumber(exp), digest = digest, field = field, fence = fence,
    confirmed = mark == '0', length = length, owner = owner, value = v}
end

-- encode keeps the confirmed mark (a length is never 0, so "+0" is one).
local function encode(p)
  local mark = ''
  if p.confirmed then
    mark = '0'
  end
  return string.format('%.0f', p.exp) .. ':' .. p.digest .. ':' .. p.field .. ':' ..
    p.fence .. '+' .. mark .. p.length .. ':' .. p.owner
end

-- outlive raises key's TTL to at least ms (never lowers it); a key
-- without one (just made) gets one.
local function outlive(key, ms)
  local p = redis.call('PTTL', key)
  if p == -1 or (p >= 0 and p < ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- open drops the expired permits of the semaphore (hash, zset) as of now
-- and returns how many are held. Each permit is dropped once, so the cost
-- is spread over the grants.
local function open(hash, zset, now)
  local gone = redis.call('ZRANGEBYSCORE', zset, '-inf', now)
  if #gone > 0 then
    local fields = {}
    for _, slot in ipairs(gone) do
      fields[#fields + 1] = slot
      local p = parse(redis.call('HGET', hash, slot))
      if p and redis.call('HGET', hash, 't:' .. p.digest) == slot then
        fields[#fields + 1] = 't:' .. p.digest
      end
    end
    batched('HDEL', hash, fields)
    redis.call('ZREMRANGEBYSCORE', zset, '-inf', now)
  end
  return redis.call('ZCARD', zset)
end

-- mine finds digest's slot (a string) and live permit as of now. A permit
-- whose expiry has passed is not held, even when its entries are still in
-- the hash: the expiry set, which open() cleans from, can expire (by its
-- TTL) while the hash, whose TTL outlives every permit it ever held,
-- stays; without this check such a permit came back as a "renewal" and
-- put a third holder in a semaphore of limit 2 (found by the simulator,
-- seed 109; docs/safety.md, "Semaphores").
local function mine(hash, digest, now)
  local slot = redis.call('HGET', hash, 't:' .. digest)
  if not slot then
    return nil, nil
  end
  local p = parse(redis.call('HGET', hash, slot))
  if not p or p.digest ~= digest or p.exp <= now then
    return nil, nil
  end
  return slot, p
end

-- put writes p to slot, its index and its expiry.
local function put(hash, zset, slot, p, now)
  redis.call('HSET', hash, slot, encode(p), 't:' .. p.digest, slot)
  redis.call('ZADD', zset, string.format('%.0f', p.exp), slot)
  outlive(hash, p.exp - now)
  outlive(zset, p.exp - now)
  return encode(p)
end

-- drop deletes slot's permit, and the semaphore with its last one (its
-- limit goes with the last holder).
local function drop(hash, zset, slot, digest)
  redis.call('HDEL', hash, slot, 't:' .. digest)
  redis.call('ZREM', zset, slot)
  if redis.call('ZCARD', zset) == 0 then
    redis.call('DEL', hash, zset)
  end
end

-- moved is a Redis renewal's or extend's new expiry: exp (now + ttl), or
-- a millisecond past the permit's expiry before when that is as late. A
-- permit is never shortened, so one that lands late cannot cut a permit a
-- later extend was answered for; and every write by the token changes the
-- slot's value, which carries the expiry, so a release (sem_release.lua)
-- or a WAIT take-back (sem_unwait.lua) that read the permit before finds
-- it changed (docs/safety.md, "Late writes on redis", rule V1).
local function moved(before, exp)
  return math.max(before + 1, exp)
end

-- first and last: ms until the first and the last permit expires.
local function first(zset, now)
  local e = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  return e[2] and tonumber(e[2]) - now or 0
end
local function last(zset, now)
  local e = redis.call('ZRANGE', zset, -1, -1, 'WITHSCORES')
  return e[2] and tonumber(e[2]) - now or 0
end

-- slot_fence is the least fence ≥ f that is ≡ slot (mod limit): on
-- Redlock the slot is in the fence, so permits held at once never share
-- one (docs/safety.md, "Fences of permits", R1). Fences stay below 2^53,
-- where doubles are exact; f / limit may round, so the remainder is
-- brought back into [0, limit) by hand.
local function slot_fence(f, slot, limit)
  local r = (slot - f) % limit
  if r < 0 then
    r = r + limit
  elseif r >= limit then
    r = r - limit
  end
  return f + r
end

-- counter reads a fence counter (an older gateway's names a token after
-- it: "<fence>:<digest>").
local function counter(key)
  local v = redis.call('GET', key)
  if not v then
    return 0
  end
  local f = string.match(v, '^(%d+)')
  return f and tonumber(f) or 0
end

-- maker is the round that made a Redlock value, nil for Redis's ("-")
-- and a pinned one of an older gateway ("~!<id>").
local function maker(p)
  if string.sub(p.field, 1, 1) ~= '~' or string.sub(p.field, 2, 2) == '!' then
    return nil
  end
  return string.match(string.sub(p.field, 2), '^[^.]*')
end

-- The wait queue (Redis only). A ticket is "<gateway>.<id>"; the
-- heartbeats (the alive set) are per gateway, refreshed for all of a
-- gateway's waiters of the key at once (sem_heartbeat.lua). A ticket
-- without "." is an older gateway's, with a heartbeat of its own under its
-- own name (as acquire.lua).
local function gateway_of(ticket)
  return string.match(ticket, '^([^.]*)%.') or ticket
end

-- forget_dead drops the heartbeats not refreshed in time, with the older
-- gateways' tickets named by them; a newer gateway's tickets go when
-- live_tickets meets them.
local function forget_dead(queue, alive, now)
  if redis.call('EXISTS', alive) == 1 then
    local dead = redis.call('ZRANGEBYSCORE', alive, '-inf', now)
    if #dead > 0 then
      batched('ZREM', queue, dead)
      redis.call('ZREMRANGEBYSCORE', alive, '-inf', now)
    end
  end
end

-- live_tickets walks the queue from its head and returns the first upto
-- tickets whose gateway is alive, stopping early at stop (not included;
-- found is then true). Tickets of dead gateways met on the way are
-- dropped, at most 100 per call (the rest at the next), so the script
-- stays short; past that budget they count as live, which delays a grant
-- and never adds one.
local function live_tickets(queue, alive, upto, stop)
  local out, gone, known = {}, {}, {}
  local from = 0
  while #out < upto do
    local batch = redis.call('ZRANGE', queue, from, from + 99)
    if #batch == 0 then
      break
    end
    for _, t in ipairs(batch) do
      if t == stop then
        batched('ZREM', queue, gone)
        return out, true
      end
      local gw = gateway_of(t)
      if known[gw] == nil then
        known[gw] = redis.call('ZSCORE', alive, gw) ~= false
      end
      if known[gw] or #gone >= 100 then
        out[#out + 1] = t
        if #out >= upto then
          break
        end
      else
        gone[#gone + 1] = t
      end
    end
    from = from + #batch
  end
  batched('ZREM', queue, gone)
  return out, false
end
