-- Token bucket over N rules, all-or-nothing, cost 1.
--
-- Each rule keeps a hash { tokens, refilled_at }. Tokens refill continuously at
-- `refill_tokens` per `refill_ms` up to `capacity`. To keep the arithmetic in exact
-- integers (Lua numbers are doubles; fractions drift), `tokens` is stored scaled by
-- `refill_ms`: one whole token = `refill_ms` units, and each elapsed millisecond adds
-- `refill_tokens` units. A missing key is a full bucket.
--
-- A request is admitted only if EVERY rule holds at least one token; otherwise nothing
-- is written.
--
-- KEYS[i]          hash of rule i (all keys of a policy share one hash tag)
-- ARGV[1]          now in ms, or "" to read the Redis server clock (TIME)
-- ARGV[2]          unused (keeps the calling convention of sliding_window.lua)
-- ARGV[3i], ARGV[3i+1], ARGV[3i+2]
--                  capacity, refill_tokens, refill_ms of rule i (all > 0)
--
-- Returns a flat array of 2 + 2N integers:
--   [1]             1 = admitted, 0 = refused
--   [2]             index (1-based) of the first refusing rule, 0 when admitted
--   [3 .. 2+N]      whole tokens left per rule (after this request when admitted)
--   [3+N .. 2+2N]   retry-after in ms per rule: > 0 for each refusing rule (until one
--                   token has refilled), 0 for the others
--
-- On admission each key's TTL is the time it takes to refill completely: after that a
-- missing key and a full bucket are the same thing.

local n = #KEYS
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local levels, remaining, retry = {}, {}, {}
local first_refusing = 0

for i = 1, n do
  local capacity = tonumber(ARGV[3 * i])
  local refill_tokens = tonumber(ARGV[3 * i + 1])
  local refill_ms = tonumber(ARGV[3 * i + 2])
  local full = capacity * refill_ms
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'refilled_at')
  local level = tonumber(state[1])
  local at = tonumber(state[2])
  if level == nil or at == nil then
    level = full
  else
    local elapsed = now - at
    if elapsed > 0 then level = level + elapsed * refill_tokens end
    if level > full then level = full end
  end
  levels[i] = level
  if level < refill_ms then
    if first_refusing == 0 then first_refusing = i end
    remaining[i] = 0
    -- ceil((refill_ms - level) / refill_tokens) in integers
    retry[i] = math.floor((refill_ms - level + refill_tokens - 1) / refill_tokens)
  else
    remaining[i] = math.floor(level / refill_ms)
    retry[i] = 0
  end
end

if first_refusing > 0 then
  local out = {0, first_refusing}
  for i = 1, n do out[2 + i] = remaining[i] end
  for i = 1, n do out[2 + n + i] = retry[i] end
  return out
end

for i = 1, n do
  local capacity = tonumber(ARGV[3 * i])
  local refill_tokens = tonumber(ARGV[3 * i + 1])
  local refill_ms = tonumber(ARGV[3 * i + 2])
  local level = levels[i] - refill_ms
  redis.call('HSET', KEYS[i], 'tokens', level, 'refilled_at', now)
  local ttl = math.floor((capacity * refill_ms - level + refill_tokens - 1) / refill_tokens)
  if ttl < 1 then ttl = 1 end
  redis.call('PEXPIRE', KEYS[i], ttl)
  remaining[i] = math.floor(level / refill_ms)
end

local out = {1, 0}
for i = 1, n do out[2 + i] = remaining[i] end
for i = 1, n do out[2 + n + i] = 0 end
return out
