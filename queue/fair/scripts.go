package fair

import "github.com/redis/go-redis/v9"

// Every script runs the same prelude: read Redis's clock, then (in the scripts
// that change state) reclaim what expired before doing its own change, and
// dispatch what the window allows after it. So whichever process touches the
// dispatcher first after a slot frees up performs the dispatch, and the order of
// dispatch is the same whoever does it.
//
// Keys (KEYS[n]; only the fixed keys are declared, so a Cluster client routes
// the script to the family's slot — the per-key and per-task keys below are
// built here from the same "{prefix}:" and so are in the same slot):
//
//	1 V        STRING  global virtual time
//	2 dl       ZSET    id → lease deadline (ms) of every task in flight
//	3 workers  ZSET    worker → expiry of its registration (ms)
//	4 cap      HASH    worker → capacity
//	5 parked   SET     keys at their limit
//	6 keys     SET     keys with pending work
//	7 pending  STRING  tasks pending, all keys
//
//	{prefix}:t:<id>         HASH  k (key), p (priority), s (spec), at (submit ms), st (p|d|r), w (worker)
//	{prefix}:k:<key>        HASH  f (finish tag), w (weight), l (limit), n (in flight), j (bit mask of the ready sets holding it)
//	{prefix}:l:<prio>:<key> LIST  the key's pending ids at that priority, FIFO
//	{prefix}:ready:<prio>   ZSET  key → next finish tag (f + SCALE/w)
//	{prefix}:oldest:<prio>  ZSET  key → submit ms of the head of its line
//
// Arguments: ARGV 1 "{prefix}:", 2 aging ms, 3 dispatch lease ms, 4 run lease
// ms, 5 worker ttl ms, 6 scan, then the script's own from 7.
//
// A dispatching script replies a flat array of dispatched tasks, 5 items each:
// id, key, priority, spec, waited ms.
const prelude = `
local T = ARGV[1]
local aging, dlease, rlease, wttl, scan = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local VK, DL, WK, CAP, PARK, PK, PEND = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local SCALE = 1000000
local out = {}

local function th(id) return T .. 't:' .. id end
local function kh(k) return T .. 'k:' .. k end
local function line(p, k) return T .. 'l:' .. p .. ':' .. k end
local function ready(p) return T .. 'ready:' .. p end
local function oldest(p) return T .. 'oldest:' .. p end
local function num(v, d) if v then return tonumber(v) end return d end

-- settle brings a key's derived state in line with its lines, in-flight count
-- and limit: parked or not, in the ready sets (with its current tag and head
-- times) or not, or forgotten altogether when it has nothing pending and
-- nothing in flight. Every change to a key ends with it. The key's field j is
-- the bit mask of the levels whose ready sets hold it (0: it is in none), so
-- leaving them touches only those.
local function settle(k)
  local K = kh(k)
  local h = redis.call('HMGET', K, 'n', 'l', 'j', 'f', 'w')
  local n, lim, mask, f, w = num(h[1], 0), num(h[2], 0), num(h[3], 0), num(h[4], 0), num(h[5], 1)
  local lens, pend = {}, 0
  for p = 1, 5 do
    lens[p] = redis.call('LLEN', line(p, k))
    pend = pend + lens[p]
  end
  local function leave()
    for p = 1, 5 do
      if math.floor(mask / 2 ^ (p - 1)) % 2 == 1 then
        redis.call('ZREM', ready(p), k)
        redis.call('ZREM', oldest(p), k)
      end
    end
  end
  if pend == 0 and n <= 0 then
    leave()
    redis.call('DEL', K)
    redis.call('SREM', PARK, k)
    redis.call('SREM', PK, k)
    return
  end
  if pend > 0 then redis.call('SADD', PK, k) else redis.call('SREM', PK, k) end
  local parked = lim > 0 and n >= lim
  if parked then redis.call('SADD', PARK, k) else redis.call('SREM', PARK, k) end
  if pend == 0 or parked then
    if mask > 0 then
      leave()
      redis.call('HSET', K, 'j', 0)
    end
    return
  end
  if mask == 0 then
    -- A key joining the ready sets banks no credit for its idle (or parked)
    -- time: its finish tag starts no earlier than the virtual time.
    local v = num(redis.call('GET', VK), 0)
    if v > f then
      f = v
      redis.call('HSET', K, 'f', string.format('%d', f))
    end
  end
  local tag = f + math.floor(SCALE / w)
  local now_mask = 0
  for p = 1, 5 do
    local bit = 2 ^ (p - 1)
    if lens[p] > 0 then
      now_mask = now_mask + bit
      redis.call('ZADD', ready(p), tag, k)
      local head = redis.call('LINDEX', line(p, k), 0)
      redis.call('ZADD', oldest(p), num(redis.call('HGET', th(head), 'at'), now), k)
    elseif math.floor(mask / bit) % 2 == 1 then
      redis.call('ZREM', ready(p), k)
      redis.call('ZREM', oldest(p), k)
    end
  end
  if now_mask ~= mask then redis.call('HSET', K, 'j', now_mask) end
end

-- run marks a known task running (lease rlease) for worker; a task back in
-- its line (its dispatch lease expired, yet a worker started it) leaves the
-- line and counts in flight again.
local function run(id, st, k, p, worker)
  local t = th(id)
  if st == 'p' then
    redis.call('LREM', line(p, k), 1, id)
    redis.call('DECR', PEND)
    redis.call('HINCRBY', kh(k), 'n', 1)
    redis.call('HSET', t, 'st', 'r', 'w', worker)
    redis.call('ZADD', DL, now + rlease, id)
    settle(k)
    return
  end
  redis.call('HSET', t, 'st', 'r', 'w', worker)
  redis.call('ZADD', DL, now + rlease, id)
end

-- release forgets task id, whose record r is {state, key, priority}:
-- pending, it leaves its line; in flight, it frees its slot. With only_pending
-- a task in flight is left alone. It reports whether it released the task.
local function release(id, r, only_pending)
  local t = th(id)
  if r[1] == 'p' then
    redis.call('LREM', line(r[3], r[2]), 1, id)
    redis.call('DECR', PEND)
  elseif r[1] and not only_pending then
    redis.call('ZREM', DL, id)
    redis.call('HINCRBY', kh(r[2]), 'n', -1)
  else
    return false
  end
  redis.call('DEL', t)
  settle(r[2])
  return true
end

-- reclaim handles up to scan expired workers and scan expired leases: a
-- dispatched task goes back to the head of its line, a running one is dropped
-- (asynq redelivers it and Started registers it again).
local function reclaim()
  for _, w in ipairs(redis.call('ZRANGEBYSCORE', WK, '-inf', now, 'LIMIT', 0, scan)) do
    redis.call('ZREM', WK, w)
    redis.call('HDEL', CAP, w)
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', DL, '-inf', now, 'LIMIT', 0, scan)) do
    redis.call('ZREM', DL, id)
    local t = th(id)
    local r = redis.call('HMGET', t, 'st', 'k', 'p')
    if r[1] == 'd' then
      redis.call('LPUSH', line(r[3], r[2]), id)
      redis.call('HSET', t, 'st', 'p')
      redis.call('INCR', PEND)
      redis.call('HINCRBY', kh(r[2]), 'n', -1)
      settle(r[2])
    elseif r[1] then
      redis.call('DEL', t)
      redis.call('HINCRBY', kh(r[2]), 'n', -1)
      settle(r[2])
    end
  end
end

-- pick dispatches one task: the level with the highest effective priority
-- (priority plus one per aging period its oldest head waited; ties to the
-- higher priority), then the key of that level with the smallest next finish
-- tag, then the head of that key's line. Start-time fair queuing: the pick
-- starts at the key's finish tag S, which advances by SCALE/weight, and the
-- virtual time moves to S (never back).
local function pick()
  local best, beff = nil, nil
  for p = 5, 1, -1 do
    local h = redis.call('ZRANGE', oldest(p), 0, 0, 'WITHSCORES')
    if #h > 0 then
      local eff = p + math.floor((now - tonumber(h[2])) / aging)
      if best == nil or eff > beff then best, beff = p, eff end
    end
  end
  if best == nil then return false end
  local k = redis.call('ZRANGE', ready(best), 0, 0)[1]
  local id = redis.call('LPOP', line(best, k))
  local K = kh(k)
  local h = redis.call('HMGET', K, 'f', 'w')
  local s, w = num(h[1], 0), num(h[2], 1)
  redis.call('HSET', K, 'f', string.format('%d', s + math.floor(SCALE / w)))
  redis.call('HINCRBY', K, 'n', 1)
  if s > num(redis.call('GET', VK), 0) then redis.call('SET', VK, string.format('%d', s)) end
  redis.call('DECR', PEND)
  local t = th(id)
  redis.call('HSET', t, 'st', 'd')
  redis.call('ZADD', DL, now + dlease, id)
  settle(k)
  local r = redis.call('HMGET', t, 's', 'at')
  out[#out + 1] = id
  out[#out + 1] = k
  out[#out + 1] = best
  out[#out + 1] = r[1] or ''
  out[#out + 1] = now - num(r[2], now)
  return true
end

-- dispatch picks while the window (capacity of live workers) has room, at
-- most scan tasks per call. Nothing pending is the common case of Done and
-- Heartbeat in a quiet fleet: it costs one GET.
local function dispatch()
  local pending, n = num(redis.call('GET', PEND), 0), 0
  if pending <= 0 then return end
  local window = 0
  for _, c in ipairs(redis.call('HVALS', CAP)) do window = window + tonumber(c) end
  local free = window - redis.call('ZCARD', DL)
  while free > 0 and n < scan and pending > 0 do
    if not pick() then break end
    free = free - 1
    pending = pending - 1
    n = n + 1
  end
end
`

// submitScript: ARGV 7 id, 8 key, 9 weight, 10 limit, 11 priority, 12 spec.
// A known id is left as it is. The key's weight and limit are the latest
// Submit's.
var submitScript = redis.NewScript(prelude + `
reclaim()
local id, k, p = ARGV[7], ARGV[8], ARGV[11]
local t = th(id)
if redis.call('EXISTS', t) == 0 then
  redis.call('HSET', t, 'k', k, 'p', p, 's', ARGV[12], 'at', now, 'st', 'p')
  redis.call('RPUSH', line(p, k), id)
  redis.call('HSET', kh(k), 'w', ARGV[9], 'l', ARGV[10])
  redis.call('INCR', PEND)
  settle(k)
end
dispatch()
return out
`)

// startedScript: ARGV 7 worker, 8 id, 9 key (for an unknown id). It frees no
// slot, so it neither reclaims nor dispatches: a task whose dispatch lease
// expired but was not reclaimed yet simply becomes running.
var startedScript = redis.NewScript(prelude + `
local worker, id = ARGV[7], ARGV[8]
local t = th(id)
local r = redis.call('HMGET', t, 'st', 'k', 'p')
if r[1] then
  run(id, r[1], r[2], r[3], worker)
else
  local k = ARGV[9]
  redis.call('HSET', t, 'k', k, 'p', 0, 'at', now, 'st', 'r', 'w', worker)
  redis.call('ZADD', DL, now + rlease, id)
  redis.call('HINCRBY', kh(k), 'n', 1)
  settle(k)
end
return out
`)

// doneScript: ARGV 7 id. Releases the task whatever its state.
var doneScript = redis.NewScript(prelude + `
reclaim()
local id = ARGV[7]
release(id, redis.call('HMGET', th(id), 'st', 'k', 'p'), false)
dispatch()
return out
`)

// cancelScript: ARGV 7 id. Removes a pending task; reply {1} or {0}.
var cancelScript = redis.NewScript(prelude + `
reclaim()
local id = ARGV[7]
if release(id, redis.call('HMGET', th(id), 'st', 'k', 'p'), true) then return {1} end
return {0}
`)

// heartbeatScript: ARGV 7 worker, 8 capacity, 9… ids the worker runs. Ids the
// dispatcher does not know are left to Started (it needs their key).
var heartbeatScript = redis.NewScript(prelude + `
reclaim()
local worker = ARGV[7]
redis.call('ZADD', WK, now + wttl, worker)
redis.call('HSET', CAP, worker, ARGV[8])
for i = 9, #ARGV do
  local id = ARGV[i]
  local r = redis.call('HMGET', th(id), 'st', 'k', 'p')
  if r[1] then run(id, r[1], r[2], r[3], worker) end
end
dispatch()
return out
`)

// leaveScript: ARGV 7 worker.
var leaveScript = redis.NewScript(prelude + `
redis.call('ZREM', WK, ARGV[7])
redis.call('HDEL', CAP, ARGV[7])
return out
`)

// pumpScript reclaims and dispatches.
var pumpScript = redis.NewScript(prelude + `
reclaim()
dispatch()
return out
`)

// statsScript reads without changing anything: {pending, keys, inflight,
// window, blocked}. Workers whose registration expired do not count even if
// not reclaimed yet.
var statsScript = redis.NewScript(prelude + `
local window = 0
for _, w in ipairs(redis.call('ZRANGEBYSCORE', WK, '(' .. now, '+inf')) do
  window = window + num(redis.call('HGET', CAP, w), 0)
end
return {num(redis.call('GET', PEND), 0), redis.call('SCARD', PK), redis.call('ZCARD', DL), window, redis.call('SCARD', PARK)}
`)

// inFlightScript: ARGV 7 key.
var inFlightScript = redis.NewScript(prelude + `
return {num(redis.call('HGET', kh(ARGV[7]), 'n'), 0)}
`)
