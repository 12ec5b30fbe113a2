-- Sliding-window log over N rules, all-or-nothing, a cost per rule.
--
-- Each rule keeps a sorted set of the hits it admitted (score = admission time in ms,
-- member = the request's unique id, with `.2`..`.c` for the further hits of a request
-- of cost c). A request of cost c is admitted only if EVERY rule has at most
-- `threshold - c` entries inside its window; otherwise no entry is written, not even
-- the trimming of expired entries, so a refused request leaves no trace.
--
-- TTL: a key must live as long as its newest entry counts (newest + window - now). An
-- admission sets it to the window. The one write a refusal may make: after a rule edit
-- raised the window, a key that meets only refusals would keep its old, shorter TTL and
-- take its entries with it too soon, so a refused call extends the TTL of each key it
-- read live entries from when the TTL falls short of that by more than 1 % of the
-- window (at least 2 ms). Smaller shortfalls are clock noise (the millisecond TIME was
-- read in; app clocks of different instances) and cost entries at most that much of
-- their life. With steady rules and the Redis clock a refusal writes nothing.
--
-- KEYS[i]          sorted set of rule i (all keys of a policy share one hash tag)
-- ARGV[1]          now in ms, or "" to read the Redis server clock (TIME)
-- ARGV[2]          unique request id (the member added on admission; never a bare
--                  timestamp, so two requests in the same millisecond both count)
-- ARGV[3]          m: rules 1..m are enforced, m+1..n are shadow rules (see below)
-- ARGV[2 + 2i]     window of rule i in ms (> 0)
-- ARGV[3 + 2i]     threshold of rule i (> 0)
-- ARGV[3 + 2n + i] the cost of rule i (> 0; missing: 1)
--
-- Returns exactly what the response headers and the denial cache need (the contract
-- every algorithm's script keeps, in src/limiter/backend.rs):
--   admitted: {1, t, remaining, next, late, 0, near, shadow, left_1..left_n}
--                                 t = the rule with the fewest requests left after this
--                                 one (1-based; the first on ties), remaining = that count,
--                                 next = when remaining is 0, ms until t admits again
--                                 (this request took its last slot), else 0
--   refused:  {0, r, wait, longest, late}
--                                 r = the first refusing rule (1-based), wait = ms until
--                                 it would admit, longest = the longest wait among all
--                                 refusing rules (only then would every rule admit);
--                                 a cost above the threshold never fits: its wait is
--                                 the whole window
--   left_i = hits rule i has left after this request (threshold - count; 0 for a
--          shadow rule that would have refused)
--   late = µs past the millisecond the Redis clock read (0 with ARGV[1]): waits are
--          whole milliseconds from that millisecond, so the caller (the denial cache)
--          subtracts it to know exactly when they end
--   0    = the delay a shaper asks for (this algorithm never delays)
--   near = bit i-1 set: rule i's count, this request's hits included, is above 80 % of its
--          threshold (envoy's near_limit)
--   shadow = bit i-1 set: shadow rule i would have refused
--
-- Shadow rules (m+1..n) see only what the enforced rules admitted, and decide it as
-- they would if enforced: one that has room records the request, one that is full
-- writes nothing and sets its bit. They are never named as a refusing rule.
--
-- Cost: a rule that admits costs one ZCOUNT while deciding; a refusing one also one
-- ZRANGE by rank (O(log n), the threshold-th newest entry is the one whose expiry opens
-- a slot). A refused call also reads PTTL and the newest entry (ZRANGE by rank) of each
-- key with live entries it read. A rule's wait never exceeds its window, so once a refusal is known and the
-- longest wait so far covers a later rule's window, that rule cannot change the reply
-- and is skipped.

local n = #KEYS
local m = tonumber(ARGV[3])
local costs = {}
for i = 1, n do costs[i] = tonumber(ARGV[3 + 2 * n + i]) or 1 end
local now = tonumber(ARGV[1])
-- Microseconds past the millisecond `now` stands for: waits count from that
-- millisecond, so they end this much sooner after the call than they read.
local late = 0
if not now then
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  now = tonumber(t[1]) * 1000 + math.floor(us / 1000)
  late = us % 1000
end

local refusing, wait, longest = 0, 0, 0
local tightest, least, tightest_threshold = 0, 0, 0
-- Pass 1 reads only. The windows are kept for pass 2 so ARGV is parsed once, the live
-- counts for the TTL check of a refusal (nil: the rule was skipped).
local windows, counts = {}, {}
local near = 0

for i = 1, m do
  local window = tonumber(ARGV[2 + 2 * i])
  windows[i] = window
  if refusing == 0 or longest < window then
    local threshold = tonumber(ARGV[3 + 2 * i])
    local count = redis.call('ZCOUNT', KEYS[i], '(' .. (now - window), '+inf')
    counts[i] = count
    local cost = costs[i]
    if count + cost > threshold then
      -- Live entries are the newest ones; the (threshold - cost + 1)-th newest must
      -- expire first.
      local w = window
      if cost <= threshold then
        local k = threshold - cost + 1
        local nth = redis.call('ZRANGE', KEYS[i], -k, -k, 'WITHSCORES')
        w = tonumber(nth[2]) + window - now
      end
      if w < 1 then w = 1 end
      if refusing == 0 then refusing, wait = i, w end
      if w > longest then longest = w end
    elseif refusing == 0 then
      local left = threshold - count - cost
      if tightest == 0 or left < least then
        tightest, least, tightest_threshold = i, left, threshold
      end
      if (count + cost) * 5 > threshold * 4 then near = near + 2 ^ (i - 1) end
    end
  end
end

-- A key read with entries keeps them until its newest leaves the window, though an
-- edit lengthened the window after the key's TTL was set.
local function keep(i)
  if counts[i] and counts[i] > 0 then
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl >= 0 then
      local newest = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
      local need = tonumber(newest[2]) + windows[i] - now
      if need - ttl > math.max(2, math.floor(windows[i] / 100)) then
        redis.call('PEXPIRE', KEYS[i], need)
      end
    end
  end
end

if refusing > 0 then
  -- No entry is written; only a TTL that falls short of the window (see the header),
  -- shadow rules' too: nothing else extends them while the enforced rules refuse.
  for i = 1, m do keep(i) end
  for i = m + 1, n do
    windows[i] = tonumber(ARGV[2 + 2 * i])
    counts[i] = redis.call('ZCOUNT', KEYS[i], '(' .. (now - windows[i]), '+inf')
    keep(i)
  end
  return {0, refusing, wait, longest, late}
end

-- Every enforced rule admits; each shadow rule decides as if enforced.
local shadow = 0
local record = {}
for i = 1, n do record[i] = i <= m end
for i = m + 1, n do
  local window = tonumber(ARGV[2 + 2 * i])
  local threshold = tonumber(ARGV[3 + 2 * i])
  windows[i] = window
  local count = redis.call('ZCOUNT', KEYS[i], '(' .. (now - window), '+inf')
  counts[i] = count
  if count + costs[i] > threshold then
    shadow = shadow + 2 ^ (i - 1)
    keep(i)
  else
    record[i] = true
    if (count + costs[i]) * 5 > threshold * 4 then near = near + 2 ^ (i - 1) end
  end
end

-- Pass 2: trim, record, and let the key expire with its window.
local member = ARGV[2]
local reply = {1, 0, 0, 0, late, 0, 0, 0}
for i = 1, n do
  reply[8 + i] = 0
  if record[i] then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - windows[i])
    redis.call('ZADD', KEYS[i], now, member)
    for k = 2, costs[i] do redis.call('ZADD', KEYS[i], now, member .. '.' .. k) end
    redis.call('PEXPIRE', KEYS[i], windows[i])
    reply[8 + i] = tonumber(ARGV[3 + 2 * i]) - counts[i] - costs[i]
  end
end
local next_ms = 0
if tightest > 0 and least == 0 then
  -- Full again: a slot opens when the threshold-th newest entry (this one included)
  -- expires.
  local nth = redis.call('ZRANGE', KEYS[tightest], -tightest_threshold, -tightest_threshold,
    'WITHSCORES')
  next_ms = tonumber(nth[2]) + windows[tightest] - now
  if next_ms < 1 then next_ms = 1 end
end
reply[2], reply[3], reply[4], reply[7], reply[8] = tightest, least, next_ms, near, shadow
return reply
