package governor

import "github.com/redis/go-redis/v9"

// admitLua admits one call, all or nothing (see doc.go).
//
// KEYS: nb block keys, then per check its log (sorted set of "ticket:tokens"
// scored by admission ms), token counter and concurrency set (tickets scored
// by expiry ms).
// ARGV: ticket, tokens, window+guard ms, slot ttl ms, concurrency poll ms, nb,
// nc, nb block names, then per check rpm, tpm, concurrency, name.
// Returns {status, wait ms, limit, now ms}: 0 admitted, 1 wait, 2 never.
const admitLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ticket = ARGV[1]
local tokens = tonumber(ARGV[2])
local win = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local poll = tonumber(ARGV[5])
local nb = tonumber(ARGV[6])
local nc = tonumber(ARGV[7])
local a = 7 + nb
local wait, why = 0, ''
local function hold(w, name)
  if w < 1 then w = 1 end
  if w > wait then wait = w; why = name end
end
local function toks(m)
  return tonumber(string.match(m, ':(%d+)$')) or 0
end
for i = 1, nc do
  local o = a + (i - 1) * 4
  local tpm = tonumber(ARGV[o + 2])
  if tpm > 0 and tokens > tpm then
    return {2, tpm, ARGV[o + 4] .. ' tpm', now}
  end
end
for i = 1, nb do
  local v = tonumber(redis.call('GET', KEYS[i]))
  if v and v > now then hold(v - now, ARGV[7 + i]) end
end
for i = 1, nc do
  local k = nb + (i - 1) * 3
  local log, tok, conc = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]
  local o = a + (i - 1) * 4
  local rpm, tpm, cc, name = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3]), ARGV[o + 4]
  if rpm > 0 or tpm > 0 then
    local cutoff = now - win
    local old = redis.call('ZRANGEBYSCORE', log, '-inf', cutoff)
    if #old > 0 then
      local gone = 0
      for _, m in ipairs(old) do gone = gone + toks(m) end
      redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
      redis.call('DECRBY', tok, gone)
    end
    local n = redis.call('ZCARD', log)
    if n == 0 then redis.call('DEL', tok) end
    if rpm > 0 and n >= rpm then
      local e = redis.call('ZRANGE', log, n - rpm, n - rpm, 'WITHSCORES')
      hold(tonumber(e[2]) + win - now, name .. ' rpm')
    end
    if tpm > 0 then
      local used = tonumber(redis.call('GET', tok) or '0')
      if used + tokens > tpm then
        -- The log is the truth: recount (heals a drifted counter), then find
        -- the entry whose leaving frees enough.
        local es = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES')
        used = 0
        for j = 1, #es, 2 do used = used + toks(es[j]) end
        if n > 0 then
          redis.call('SET', tok, used, 'KEEPTTL')
          if redis.call('PTTL', tok) < 0 then redis.call('PEXPIRE', tok, win + 1000) end
        end
        local need = used + tokens - tpm
        if need > 0 then
          local freed = 0
          for j = 1, #es, 2 do
            freed = freed + toks(es[j])
            if freed >= need then
              hold(tonumber(es[j + 1]) + win - now, name .. ' tpm')
              break
            end
          end
        end
      end
    end
  end
  if cc > 0 then
    redis.call('ZREMRANGEBYSCORE', conc, '-inf', now)
    local n = redis.call('ZCARD', conc)
    if n >= cc then
      local e = redis.call('ZRANGE', conc, n - cc, n - cc, 'WITHSCORES')
      local w = tonumber(e[2]) - now
      if w > poll then w = poll end
      hold(w, name .. ' concurrency')
    end
  end
end
if wait > 0 then return {1, wait, why, now} end
for i = 1, nc do
  local k = nb + (i - 1) * 3
  local o = a + (i - 1) * 4
  local rpm, tpm, cc = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
  if rpm > 0 or tpm > 0 then
    redis.call('ZADD', KEYS[k + 1], now, ticket .. ':' .. tokens)
    redis.call('INCRBY', KEYS[k + 2], tokens)
    redis.call('PEXPIRE', KEYS[k + 1], win + 1000)
    redis.call('PEXPIRE', KEYS[k + 2], win + 1000)
  end
  if cc > 0 then
    redis.call('ZADD', KEYS[k + 3], now + ttl, ticket)
    redis.call('PEXPIRE', KEYS[k + 3], ttl + 1000)
  end
end
return {0, 0, '', now}
`

// doneLua corrects a reservation and frees its slots.
// KEYS: per check log, token counter, concurrency set.
// ARGV: ticket, estimated tokens, actual tokens (-1 = keep the estimate).
const doneLua = `
local ticket, est, actual = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 1, #KEYS, 3 do
  local log, tok, conc = KEYS[i], KEYS[i + 1], KEYS[i + 2]
  if actual >= 0 and actual ~= est then
    local s = redis.call('ZSCORE', log, ticket .. ':' .. est)
    if s then
      redis.call('ZREM', log, ticket .. ':' .. est)
      redis.call('ZADD', log, s, ticket .. ':' .. actual)
      redis.call('INCRBY', tok, actual - est)
      local p = redis.call('PTTL', log)
      if p > 0 then redis.call('PEXPIRE', tok, p) end
    end
  end
  redis.call('ZREM', conc, ticket)
end
return 0
`

// blockLua sets "blocked until" (Redis ms) on KEYS[1] for ARGV[1] ms, never
// shortening a longer block. Returns the block left, in ms.
const blockLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local d = tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]))
if cur and cur >= now + d then return cur - now end
redis.call('SET', KEYS[1], now + d, 'PX', d)
return d
`

type scripts struct {
	admit, done, block *redis.Script
}

func newScripts() scripts {
	return scripts{
		admit: redis.NewScript(admitLua),
		done:  redis.NewScript(doneLua),
		block: redis.NewScript(blockLua),
	}
}
