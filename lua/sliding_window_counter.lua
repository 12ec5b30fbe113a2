-- Sliding-window counter over N rules, all-or-nothing, a cost per rule (the calling
-- convention and the reply are the limiter's contract, written once in
-- src/limiter/backend.rs).
--
-- Cloudflare's approximation of the sliding window: each rule keeps two counts, the
-- current aligned window's and the previous one's, and estimates the requests in the
-- last `window_ms` as
--     prev * (window - elapsed) / window + cur
-- (elapsed = ms since the current window began). A request of cost c counts c hits: it
-- is admitted only if, for EVERY enforced rule, the estimate including it is at most
-- `threshold`:
--     prev * (window - elapsed) + (cur + c) * window <= threshold * window
-- (integers: exact while the products stay below 2^53). O(1) state per key: one hash
-- { start, cur, prev, w }.
--
-- Rules change at run time. An edit keeps the counts: `w` is the window they were
-- written with, and when it differs from the rule's, the stored window is re-anchored
-- to the window of the new length that contains its start (the start aligned down),
-- its counts unchanged. The state read is then a function of what is stored alone, so
-- a wait stays exact across an edit (the denial cache relies on it). A stored window
-- that starts at or after the aligned one (an app clock behind another's) stays the
-- current one: windows never move back.
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
-- left_1..left_n}, refused {0, r, wait, longest, late}; remaining and left_i = whole
-- hits the estimate has room for after this request (left_i 0 for a shadow rule that
-- would have refused). A cost above the threshold never fits: its wait is until both
-- counts stop counting (the end of the next window). A wait is exact for the stored counts: the first ms at
-- which the estimate has room again (admissions meanwhile only make it later).
--
-- TTL: an admission sets the key to live until the end of the next window (its count
-- is the next window's `prev`). The one write a refusal may make: after an edit
-- lengthened the window, a key that meets only refusals would keep its old, shorter
-- TTL, so a refused call extends the TTL of each key it read counts from when it
-- falls short of the (re-anchored) window's end plus one window by more than 1 % of
-- the window (at least 2 ms).

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

-- Each stored key's window start under the rule's window, for a refusal's TTL check.
local anchors = {}
-- The counts in force for rule i at `now`: start of the current window, cur, prev.
local function read(i, window)
  local aligned = now - now % window
  local state = redis.call('HMGET', KEYS[i], 'start', 'cur', 'prev', 'w')
  local start = tonumber(state[1])
  if not start then return aligned, 0, 0 end
  local cur, prev = tonumber(state[2]) or 0, tonumber(state[3]) or 0
  if (tonumber(state[4]) or window) ~= window then start = start - start % window end
  anchors[i] = start
  if start >= aligned then return start, cur, prev end
  if start == aligned - window then return aligned, 0, cur end
  return aligned, 0, 0
end

-- ms from now until the estimate has room for `cost` more, given cur and prev.
local function wait_for(start, cur, prev, window, threshold, cost)
  if cost > threshold then return math.max(1, start + 2 * window - now) end
  local elapsed = math.max(0, now - start)
  if cur + cost <= threshold then
    -- prev * (window - e) <= (threshold - cur - cost) * window
    local need = window - math.floor((threshold - cur - cost) * window / prev)
    return math.max(1, need - elapsed)
  end
  -- The next window: prev' = cur, cur' = 0.
  local need = window - math.floor((threshold - cost) * window / cur)
  return math.max(1, (start + window - now) + need)
end

local states = {}
-- Decides rule i: admits (left = whole requests of room after this one) or waits.
local function decide(i)
  local window = tonumber(ARGV[2 + 2 * i])
  local threshold = tonumber(ARGV[3 + 2 * i])
  local start, cur, prev = read(i, window)
  states[i] = {start, cur, prev}
  local elapsed = math.max(0, now - start)
  local room = threshold * window - prev * (window - elapsed) - (cur + costs[i]) * window
  if room < 0 then return false, wait_for(start, cur, prev, window, threshold, costs[i]) end
  local near = (threshold * window - room) * 5 > threshold * window * 4
  return true, math.floor(room / window), near
end

local refusing, wait, longest = 0, 0, 0
-- With app clocks a stored window may start after the aligned one (another
-- instance's clock is ahead), and its wait be longer than the bound: no skipping.
local skewed = ARGV[1] ~= ''
local tightest, least = 0, 0
local near = 0
for i = 1, m do
  -- A wait is at most two windows: once the longest covers that, a rule cannot matter.
  if refusing == 0 or skewed or longest < 2 * tonumber(ARGV[2 + 2 * i]) then
    local admits, v, close = decide(i)
    if not admits then
      if refusing == 0 then refusing, wait = i, v end
      if v > longest then longest = v end
    elseif refusing == 0 then
      if tightest == 0 or v < least then tightest, least = i, v end
      if close then near = near + 2 ^ (i - 1) end
    end
  end
end

-- A key read keeps its counts until they stop counting (two windows from its anchor),
-- though an edit lengthened the window after the key's TTL was set.
local function keep(i)
  if anchors[i] then
    local window = tonumber(ARGV[2 + 2 * i])
    local need = anchors[i] + 2 * window - now
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
    decide(i)
    keep(i)
  end
  return {0, refusing, wait, longest, late}
end

local shadow = 0
local record = {}
for i = 1, n do record[i] = i <= m end
for i = m + 1, n do
  local admits, _, close = decide(i)
  if admits then
    record[i] = true
    if close then near = near + 2 ^ (i - 1) end
  else
    shadow = shadow + 2 ^ (i - 1)
    keep(i)
  end
end

local reply = {1, 0, 0, 0, late, 0, 0, 0}
for i = 1, n do
  reply[8 + i] = 0
  if record[i] then
    local window = tonumber(ARGV[2 + 2 * i])
    local s = states[i]
    s[2] = s[2] + costs[i]
    reply[8 + i] = math.floor((tonumber(ARGV[3 + 2 * i]) * window
      - s[3] * (window - math.max(0, now - s[1])) - s[2] * window) / window)
    redis.call('HSET', KEYS[i], 'start', s[1], 'cur', s[2], 'prev', s[3], 'w', window)
    redis.call('PEXPIRE', KEYS[i], math.max(1, s[1] + 2 * window - now))
  end
end
local next_ms = 0
if tightest > 0 and least == 0 then
  local s = states[tightest]
  next_ms = wait_for(s[1], s[2], s[3], tonumber(ARGV[2 + 2 * tightest]),
    tonumber(ARGV[3 + 2 * tightest]), 1)
end
reply[2], reply[3], reply[4], reply[7], reply[8] = tightest, least, next_ms, near, shadow
return reply
