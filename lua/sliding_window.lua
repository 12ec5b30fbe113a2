-- Sliding-window log over N rules, all-or-nothing.
--
-- Each rule keeps a sorted set of the requests it admitted (score = admission time in
-- ms, member = the request's unique id). A request is admitted only if EVERY rule has
-- fewer than `threshold` entries inside its window; otherwise nothing at all is written,
-- not even the trimming of expired entries, so a refused request leaves no trace.
--
-- KEYS[i]          sorted set of rule i (all keys of a policy share one hash tag)
-- ARGV[1]          now in ms, or "" to read the Redis server clock (TIME)
-- ARGV[2]          unique request id (the member added on admission; never a bare
--                  timestamp, so two requests in the same millisecond both count)
-- ARGV[1 + 2i]     window of rule i in ms (> 0)
-- ARGV[2 + 2i]     threshold of rule i (> 0)
--
-- Returns a flat array of 2 + 2N integers:
--   [1]             1 = admitted, 0 = refused
--   [2]             index (1-based) of the first refusing rule, 0 when admitted
--   [3 .. 2+N]      remaining per rule: after this request when admitted, as it stands
--                   when refused (0 for a refusing rule)
--   [3+N .. 2+2N]   retry-after in ms per rule: > 0 for each refusing rule (until enough
--                   of its entries expire), 0 for the others

local n = #KEYS
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local member = ARGV[2]

local counts, remaining, retry = {}, {}, {}
local first_refusing = 0

-- Pass 1: read only. Count live entries (score > now - window) of every rule.
for i = 1, n do
  local window = tonumber(ARGV[1 + 2 * i])
  local threshold = tonumber(ARGV[2 + 2 * i])
  local count = redis.call('ZCOUNT', KEYS[i], '(' .. (now - window), '+inf')
  counts[i] = count
  if count >= threshold then
    if first_refusing == 0 then first_refusing = i end
    remaining[i] = 0
    -- A slot opens when the (count - threshold + 1)-th oldest live entry expires.
    local nth = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. (now - window), '+inf',
      'WITHSCORES', 'LIMIT', count - threshold, 1)
    local wait = tonumber(nth[2]) + window - now
    if wait < 1 then wait = 1 end
    retry[i] = wait
  else
    remaining[i] = threshold - count
    retry[i] = 0
  end
end

if first_refusing > 0 then
  local out = {0, first_refusing}
  for i = 1, n do out[2 + i] = remaining[i] end
  for i = 1, n do out[2 + n + i] = retry[i] end
  return out
end

-- Pass 2: every rule admits. Trim, record, and let the key expire with its window.
for i = 1, n do
  local window = tonumber(ARGV[1 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - window)
  redis.call('ZADD', KEYS[i], now, member)
  redis.call('PEXPIRE', KEYS[i], window)
  remaining[i] = remaining[i] - 1
end

local out = {1, 0}
for i = 1, n do out[2 + i] = remaining[i] end
for i = 1, n do out[2 + n + i] = 0 end
return out
