package lease

import "github.com/redis/go-redis/v9"

// Every script runs the same prelude: read Redis's clock, expire holders and
// waiters whose time is up, and hand free slots to the head of the wait queue. So
// whichever process touches a service first after a slot frees up performs the
// hand-off, and the order of grants is the order of the queue whoever does it.
//
// Keys (KEYS[n]):
//
//	1 holders  ZSET holder → expiry (ms, Redis clock)
//	2 grants   HASH holder → "token|acquired_ms|waited_ms"
//	3 queue    ZSET holder → enqueue sequence (FIFO order)
//	4 waiters  ZSET holder → waiter expiry (a waiter must poll to stay queued)
//	5 wsince   HASH holder → enqueue time (ms)
//	6 fence    STRING       last fencing token (INCR, never reset)
//	7 seq      STRING       last enqueue sequence
//	8 state    HASH         idle_since (ms) while nobody holds the service
//	9 stopping STRING       set while the controller stops the container
//	10 events  STREAM       the lease-events stream
//	11 secrets HASH holder → "token|secret": the grant's authorization secret
//
// Arguments: ARGV 1 service, 2 capacity, 3 ttl_ms, 4 waiter_ttl_ms, 5 events
// maxlen, then the script's own arguments from 6.
//
// Reply: { {held, waiting, expired, dropped}, {holder, token, waited_ms, ...}, result }
const prelude = `
local svc, cap, ttl, wttl, maxlen = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local H, G, Q, W, WS, F, S, ST, STOP, EV, SEC = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local expired, dropped, promoted = 0, 0, {}

local function event(typ, holder, token, ...)
  redis.call('XADD', EV, 'MAXLEN', '~', maxlen, '*', 'type', typ, 'service', svc,
    'holder', holder, 'token', token, 'at', now, ...)
end

local function parse(g)
  local tok, acq, waited = string.match(g, '^(%d+)|(%d+)|(%d+)$')
  return tonumber(tok), tonumber(acq), tonumber(waited)
end

-- secret returns the secret of holder h's grant tok, installing fresh (a
-- random value the caller drew) when the grant has none yet: a grant handed on
-- by another holder's script, or one made before secrets existed. An entry of
-- an older token (left by a process that predates secrets) is replaced.
local function secret(h, tok, fresh)
  local cur = redis.call('HGET', SEC, h)
  if cur then
    local t, sec = string.match(cur, '^(%d+)|(.+)$')
    if tonumber(t) == tok then return sec end
  end
  redis.call('HSET', SEC, h, string.format('%d', tok) .. '|' .. fresh)
  return fresh
end

local function purge()
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', H, '-inf', now)) do
    local g = redis.call('HGET', G, h)
    local tok, acq = 0, now
    if g then tok, acq = parse(g) end
    redis.call('ZREM', H, h)
    redis.call('HDEL', G, h)
    redis.call('HDEL', SEC, h)
    event('expire', h, tok, 'held_ms', now - acq)
    expired = expired + 1
  end
  for _, h in ipairs(redis.call('ZRANGEBYSCORE', W, '-inf', now)) do
    redis.call('ZREM', Q, h)
    redis.call('ZREM', W, h)
    redis.call('HDEL', WS, h)
    event('wait_expire', h, 0)
    dropped = dropped + 1
  end
end

local function promote()
  local free = cap - redis.call('ZCARD', H)
  while free > 0 do
    local head = redis.call('ZRANGE', Q, 0, 0)
    if #head == 0 then break end
    local h = head[1]
    local since = tonumber(redis.call('HGET', WS, h) or now)
    redis.call('ZREM', Q, h)
    redis.call('ZREM', W, h)
    redis.call('HDEL', WS, h)
    local tok = redis.call('INCR', F)
    redis.call('ZADD', H, now + ttl, h)
    redis.call('HSET', G, h, tok .. '|' .. string.format('%d', now) .. '|' .. string.format('%d', now - since))
    event('acquire', h, tok, 'waited_ms', now - since, 'expires_at', now + ttl)
    promoted[#promoted + 1] = h
    promoted[#promoted + 1] = tok
    promoted[#promoted + 1] = now - since
    free = free - 1
  end
  if redis.call('ZCARD', H) == 0 then
    if redis.call('HEXISTS', ST, 'idle_since') == 0 then redis.call('HSET', ST, 'idle_since', now) end
  else
    redis.call('HDEL', ST, 'idle_since')
  end
end

local function finish(result)
  return {{redis.call('ZCARD', H), redis.call('ZCARD', Q), expired, dropped}, promoted, result}
end
`

// acquireScript: ARGV 6 holder, 7 a fresh secret (used when the grant has none
// yet). A holder that already holds gets its grant back
// (and its expiry extended); anyone else joins the tail of the queue, once, and
// is granted only when everybody ahead of it was.
var acquireScript = redis.NewScript(prelude + `
local h = ARGV[6]
purge()
promote()
local g = redis.call('HGET', G, h)
local fresh = false
if not g and not redis.call('ZSCORE', Q, h) then
  redis.call('ZADD', Q, redis.call('INCR', S), h)
  redis.call('HSET', WS, h, now)
  redis.call('ZADD', W, now + wttl, h)
  promote()
  g = redis.call('HGET', G, h)
  fresh = true
  if not g then event('wait', h, 0, 'position', redis.call('ZRANK', Q, h) + 1) end
elseif g then
  fresh = false
  for i = 1, #promoted, 3 do if promoted[i] == h then fresh = true end end
end
if g then
  local tok, acq, waited = parse(g)
  redis.call('ZADD', H, now + ttl, h)
  if not fresh then event('renew', h, tok, 'expires_at', now + ttl) end
  return finish({1, tok, now + ttl, acq, waited, now, secret(h, tok, ARGV[7])})
end
redis.call('ZADD', W, now + wttl, h)
return finish({0, redis.call('ZRANK', Q, h) + 1, 0, 0, 0, now})
`)

// renewScript: ARGV 6 holder, 7 token. Only the current grant may renew; a holder
// whose grant expired (even if not reaped yet: purge runs first) is told it lost.
var renewScript = redis.NewScript(prelude + `
local h, want = ARGV[6], tonumber(ARGV[7])
purge()
promote()
local g = redis.call('HGET', G, h)
local tok = 0
if g then tok = parse(g) end
if tok == 0 or tok ~= want then
  event('renew_rejected', h, want)
  return finish({0, 0})
end
redis.call('ZADD', H, now + ttl, h)
event('renew', h, tok, 'expires_at', now + ttl)
return finish({1, now + ttl})
`)

// releaseScript: ARGV 6 holder, 7 token (0: whatever grant the holder has). Frees
// the slot of a matching grant or leaves the queue; anything else (already
// released, expired, a newer grant of the same holder) is a no-op. Result: 1
// released, 2 left the queue, 0 nothing to do.
var releaseScript = redis.NewScript(prelude + `
local h, want = ARGV[6], tonumber(ARGV[7])
purge()
local res = 0
local g = redis.call('HGET', G, h)
if g then
  local tok, acq = parse(g)
  if want == 0 or tok == want then
    redis.call('ZREM', H, h)
    redis.call('HDEL', G, h)
    redis.call('HDEL', SEC, h)
    event('release', h, tok, 'held_ms', now - acq)
    res = 1
  end
elseif redis.call('ZSCORE', Q, h) then
  redis.call('ZREM', Q, h)
  redis.call('ZREM', W, h)
  redis.call('HDEL', WS, h)
  event('cancel', h, 0)
  res = 2
end
promote()
return finish({res})
`)

// reapScript: the prelude, and the secrets of grants that are gone (left by a
// process older than secrets, which removes grants without them).
var reapScript = redis.NewScript(prelude + `
purge()
promote()
for _, h in ipairs(redis.call('HKEYS', SEC)) do
  if redis.call('HEXISTS', G, h) == 0 then redis.call('HDEL', SEC, h) end
end
return finish({})
`)

// heldScript: ARGV 6 holder, 7 a fresh secret. Holder's current grant, without
// renewing it or queueing the holder: {1, token, expiry, acquired, waited, secret}
// or {0}.
var heldScript = redis.NewScript(prelude + `
local h = ARGV[6]
purge()
promote()
local g = redis.call('HGET', G, h)
if not g then return finish({0}) end
local tok, acq, waited = parse(g)
return finish({1, tok, tonumber(redis.call('ZSCORE', H, h) or 0), acq, waited, secret(h, tok, ARGV[7])})
`)

// beginStopScript: ARGV 6 idle_ms, 7 stop_ttl_ms. Marks the service as stopping
// only if nobody holds it and nobody has for idle_ms; a grant made after this
// sees the mark (it is checked after the grant), so a container is never stopped
// under a holder that was granted before the mark.
var beginStopScript = redis.NewScript(prelude + `
purge()
promote()
if redis.call('ZCARD', H) > 0 then return finish({0}) end
local since = tonumber(redis.call('HGET', ST, 'idle_since') or now)
if now - since < tonumber(ARGV[6]) then return finish({0}) end
if not redis.call('SET', STOP, now, 'PX', ARGV[7], 'NX') then return finish({0}) end
event('stopping', '', 0, 'idle_ms', now - since)
return finish({1})
`)

// validateScript: ARGV 6 token. Whether token is a live grant right now, its
// holder and the grant's secret entry ("token|secret", or "" when the holder
// has not been told one yet): the caller compares the secret in constant time.
var validateScript = redis.NewScript(prelude + `
local want = tonumber(ARGV[6])
local kv = redis.call('HGETALL', G)
for i = 1, #kv, 2 do
  local tok = parse(kv[i + 1])
  if tok == want then
    local exp = tonumber(redis.call('ZSCORE', H, kv[i]) or 0)
    if exp > now then return finish({1, kv[i], redis.call('HGET', SEC, kv[i]) or ''}) end
  end
end
return finish({0, '', ''})
`)

// snapshotScript reads one service consistently without changing it.
var snapshotScript = redis.NewScript(prelude + `
return finish({
  redis.call('ZRANGE', H, 0, -1, 'WITHSCORES'),
  redis.call('HGETALL', G),
  redis.call('ZRANGE', Q, 0, -1),
  redis.call('HGETALL', WS),
  redis.call('ZRANGE', W, 0, -1, 'WITHSCORES'),
  redis.call('GET', F) or '0',
  redis.call('HGET', ST, 'idle_since') or '',
  redis.call('EXISTS', STOP),
  now,
})
`)
