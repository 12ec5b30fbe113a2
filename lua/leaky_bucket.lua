-- Leaky bucket as a shaper over N rules, all-or-nothing, a cost per rule (the calling
-- convention and the reply are the limiter's contract, written once in
-- src/limiter/backend.rs).
--
-- The article's "leaky bucket before the DB", Sentinel's uniform-rate mode: requests
-- leave at each rule's constant rate, `threshold` per `window_ms`, one every interval
-- of `window_ms / threshold` ms. An admitted request is given the next departure slot
-- (at the earliest now) and its answer waits for it; a request whose slot would be more
-- than `max_delay_ms` away is refused. A policy's request waits for the latest of its
-- rules' slots; each rule admits only if its own slot is within its own `max_delay_ms`.
--
-- A request of cost c takes c consecutive slots of a rule: it leaves at the first, and
-- the rule's next request c intervals later. It is admitted only if its last slot is
-- within the max delay, so a cost above `max_delay_ms / interval + 1` (the slots the
-- max delay holds) never fits; it is refused with the wait the formula gives all the
-- same (as if the rule's slot could move before now).
--
-- Exact integers: time is counted in units of 1/threshold ms, so one interval is
-- `window_ms` units. Each rule keeps a hash { at, part, scale }: its last slot as whole
-- ms and `part` units (0 <= part < scale), and the threshold it was written with. An
-- edit keeps the last slot, converting `part` to the new unit (rounded down); the next
-- slot is then one new interval after it.
--
-- KEYS[i]          hash of rule i (all keys of a policy share one hash tag)
-- ARGV[1]          now in ms, or "" to read the Redis server clock (TIME)
-- ARGV[2]          unused (the sliding log's request id)
-- ARGV[3]          m: rules 1..m are enforced, m+1..n are shadow rules
-- ARGV[1 + 3i], ARGV[2 + 3i], ARGV[3 + 3i]
--                  window_ms, threshold (> 0), max_delay_ms (>= 0) of rule i
-- ARGV[3 + 3n + i] the cost of rule i (> 0; missing: 1)
--
-- Replies (see the contract): admitted {1, t, remaining, next, late, delay, near,
-- shadow, left_1..left_n}: delay = ms the answer waits for its first slot (the latest
-- rule's, rounded up); remaining and left_i = further slots that would be admitted now
-- (within the rule's max delay; left_i 0 for a shadow rule that would have refused);
-- near = a rule's last slot is more than 80 % of its max delay away.
-- Refused {0, r, wait, longest, late}: wait = ms until the rule's last slot for the
-- request is within its max delay. Slots only move later, so a wait is exact until it ends.
--
-- A rule whose own slot is earlier than the request's departure (another rule's slot
-- is later) records the departure instead: its rate is kept between departures.
-- TTL: until one interval after the last slot (then a slot is free now, as for a
-- missing key). A refusal writes nothing.

local n = #KEYS
local m = tonumber(ARGV[3])
local costs = {}
for i = 1, n do costs[i] = tonumber(ARGV[3 + 3 * n + i]) or 1 end
local now = tonumber(ARGV[1])
local late = 0
if not now then
  local t = redis.call('TIME')
  local us = tonumber(t[2])
  now = tonumber(t[1]) * 1000 + math.floor(us / 1000)
  late = us % 1000
end

-- Rule i's next slot, in units from now (0: at once).
local slots = {}
local function slot(i, window, threshold)
  local state = redis.call('HMGET', KEYS[i], 'at', 'part', 'scale')
  local at = tonumber(state[1])
  local s = 0
  if at then
    local part = tonumber(state[2]) or 0
    local scale = tonumber(state[3]) or threshold
    if scale ~= threshold then part = math.floor(part * threshold / scale) end
    s = (at - now) * threshold + part + window
    if s < 0 then s = 0 end
  end
  slots[i] = s
  return s
end

local refusing, wait, longest = 0, 0, 0
local delay = 0
local near = 0
for i = 1, m do
  local window = tonumber(ARGV[1 + 3 * i])
  local threshold = tonumber(ARGV[2 + 3 * i])
  local bound = tonumber(ARGV[3 + 3 * i]) * threshold
  local s = slot(i, window, threshold)
  local last = s + (costs[i] - 1) * window
  if last > bound then
    local w = math.floor((last - bound + threshold - 1) / threshold)
    if refusing == 0 then refusing, wait = i, w end
    if w > longest then longest = w end
  elseif refusing == 0 then
    local d = math.floor((s + threshold - 1) / threshold)
    if d > delay then delay = d end
    if last * 5 > bound * 4 then near = near + 2 ^ (i - 1) end
  end
end

if refusing > 0 then
  return {0, refusing, wait, longest, late}
end

local shadow = 0
local record = {}
for i = 1, n do record[i] = i <= m end
for i = m + 1, n do
  local threshold = tonumber(ARGV[2 + 3 * i])
  local bound = tonumber(ARGV[3 + 3 * i]) * threshold
  local window = tonumber(ARGV[1 + 3 * i])
  local last = slot(i, window, threshold) + (costs[i] - 1) * window
  if last > bound then
    shadow = shadow + 2 ^ (i - 1)
  else
    record[i] = true
    if last * 5 > bound * 4 then near = near + 2 ^ (i - 1) end
  end
end

local tightest, least, next_ms = 0, 0, 0
local reply = {1, 0, 0, 0, late, delay, 0, 0}
for i = 1, n do
  reply[8 + i] = 0
  if record[i] then
    local window = tonumber(ARGV[1 + 3 * i])
    local threshold = tonumber(ARGV[2 + 3 * i])
    local bound = tonumber(ARGV[3 + 3 * i]) * threshold
    local s = slots[i]
    if math.floor((s + threshold - 1) / threshold) < delay then s = delay * threshold end
    -- The request's last slot: the next request's comes one interval after it.
    s = s + (costs[i] - 1) * window
    local whole = math.floor(s / threshold)
    redis.call('HSET', KEYS[i], 'at', now + whole, 'part', s - whole * threshold,
      'scale', threshold)
    redis.call('PEXPIRE', KEYS[i], math.max(1, math.floor((s + window + threshold - 1) / threshold)))
    local left = math.floor((bound - s) / window)
    if left < 0 then left = 0 end
    reply[8 + i] = left
    if i <= m then
      if tightest == 0 or left < least then
        tightest, least = i, left
        if left == 0 then
          next_ms = math.max(1, math.floor((s + window - bound + threshold - 1) / threshold))
        end
      end
    end
  end
end
reply[2], reply[3], reply[4], reply[7], reply[8] = tightest, least, next_ms, near, shadow
return reply
