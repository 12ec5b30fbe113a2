-- Fixed window over N rules, all-or-nothing, a cost per rule (the calling convention
-- and the reply are the limiter's contract, written once in src/limiter/backend.rs).
--
-- Each rule keeps a hash { start, count }: the requests admitted in the window that
-- began at `start`. Windows are aligned to multiples of `window_ms` on the clock, so
-- every instance agrees on them (one INCR-style counter per window, as envoy's
-- ratelimit keeps). A request of cost c counts c hits: it is admitted only if EVERY
-- enforced rule has count + c <= threshold in its window; otherwise nothing is written.
--
-- Rules change at run time. An edit keeps the count: it belongs to the window of the
-- new length that contains the stored window's start (the stored start, aligned down
-- to the new window). Windows never move back: a stored window that starts at or after
-- the aligned one (an app clock behind another instance's) is the one in force. A
-- stored window before the aligned one has ended and counts 0. A wait is therefore
-- exact: the window in force ends at its start plus the window, whatever the edits.
--
-- KEYS[i]          hash of rule i (all keys of a policy share one hash tag)
-- ARGV[1]          now in ms, or "" to read the Redis server clock (TIME)
-- ARGV[2]          unused (the sliding log's request id)
-- ARGV[3]          m: rules 1..m are enforced, m+1..n are shadow rules
-- ARGV[2 + 2i], ARGV[3 + 2i]
--                  window_ms, threshold of rule i (all > 0)
-- ARGV[3 + 2n + i] the cost of rule i (> 0; missing: 1)
--
-- Replies (see the contract): admitted {1, t, remaining, next, late, 0, near, shadow,
-- left_1..left_n}, refused {0, r, wait, longest, late}. A rule's wait is the end of its
-- window; a cost above the threshold never fits a window and is refused with that
-- wait too. left_i = threshold - count after this request (0 for a shadow rule that
-- would have refused).
--
-- TTL: a key lives until its window ends. The one write a refusal may make: a key
-- whose TTL falls short of its window's end by more than 1 % of the window (at least
-- 2 ms; a rule edit lengthened the window) has it extended; so has a shadow rule's key
-- whenever it refuses or the enforced rules do (the property test found a shadow
-- count expiring early after an edit, and the rule admitting what it should refuse).

local n = #KEYS
local m = tonumber(ARGV[3])
local costs = {}
for i = 1, n do costs[i] = tonumber(ARGV[3 + 2 * n + i]) or 1 end
local now = tonumber(ARGV[1])
local late = 0
if not now then
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  now = tonumber(t[1]) * 1000 + math.floor(us / 1000)
  late = us % 1000
end

local starts, counts = {}, {}
-- Reads rule i's window in force and its count.
local function read(i, window)
  local start = now - now % window
  local count = 0
  local state = redis.call('HMGET', KEYS[i], 'start', 'count')
  local stored = tonumber(state[1])
  if stored then stored = stored - stored % window end
  if stored and stored >= start then
    start, count = stored, tonumber(state[2]) or 0
  end
  starts[i], counts[i] = start, count
  return start, count
end

local refusing, wait, longest = 0, 0, 0
-- With app clocks a stored window may start after the aligned one (another
-- instance's clock is ahead), and its wait be longer than the bound: no skipping.
local skewed = ARGV[1] ~= ''
local tightest, least = 0, 0
local near = 0
for i = 1, m do
  local window = tonumber(ARGV[2 + 2 * i])
  -- A rule's wait never exceeds its window: once the longest wait covers it, skip.
  if refusing == 0 or skewed or longest < window then
    local threshold = tonumber(ARGV[3 + 2 * i])
    local start, count = read(i, window)
    if count + costs[i] > threshold then
      local w = start + window - now
      if w < 1 then w = 1 end
      if refusing == 0 then refusing, wait = i, w end
      if w > longest then longest = w end
    elseif refusing == 0 then
      local left = threshold - count - costs[i]
      if tightest == 0 or left < least then tightest, least = i, left end
      if (count + costs[i]) * 5 > threshold * 4 then near = near + 2 ^ (i - 1) end
    end
  end
end

-- A key read with a count keeps it until its window in force ends, though an edit
-- lengthened the window after the key's TTL was set.
local function keep(i)
  if counts[i] and counts[i] > 0 then
    local window = tonumber(ARGV[2 + 2 * i])
    local need = starts[i] + window - now
    local ttl = redis.call('PTTL', KEYS[i])
    if ttl >= 0 and need - ttl > math.max(2, math.floor(window / 100)) then
      redis.call('PEXPIRE', KEYS[i], need)
    end
  end
end

if refusing > 0 then
  for i = 1, m do keep(i) end
  -- Shadow rules' keys too: nothing else extends them while the enforced rules refuse.
  for i = m + 1, n do
    read(i, tonumber(ARGV[2 + 2 * i]))
    keep(i)
  end
  return {0, refusing, wait, longest, late}
end

-- Shadow rules see what the enforced rules admitted, and admit or refuse it as they
-- would if enforced; they never refuse the request.
local shadow = 0
local record = {}
for i = 1, n do record[i] = i <= m end
for i = m + 1, n do
  local threshold = tonumber(ARGV[3 + 2 * i])
  local _, count = read(i, tonumber(ARGV[2 + 2 * i]))
  if count + costs[i] > threshold then
    shadow = shadow + 2 ^ (i - 1)
    keep(i)
  else
    record[i] = true
    if (count + costs[i]) * 5 > threshold * 4 then near = near + 2 ^ (i - 1) end
  end
end

local reply = {1, 0, 0, 0, late, 0, 0, 0}
for i = 1, n do
  reply[8 + i] = 0
  if record[i] then
    local window = tonumber(ARGV[2 + 2 * i])
    counts[i] = counts[i] + costs[i]
    reply[8 + i] = tonumber(ARGV[3 + 2 * i]) - counts[i]
    redis.call('HSET', KEYS[i], 'start', starts[i], 'count', counts[i])
    local ttl = starts[i] + window - now
    if ttl < 1 then ttl = 1 end
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
local next_ms = 0
if tightest > 0 and least == 0 then
  next_ms = starts[tightest] + tonumber(ARGV[2 + 2 * tightest]) - now
  if next_ms < 1 then next_ms = 1 end
end
reply[2], reply[3], reply[4], reply[7], reply[8] = tightest, least, next_ms, near, shadow
return reply
