-- GCRA (the generic cell rate algorithm) over N rules, all-or-nothing, a cost per rule
-- (the calling convention and the reply are the limiter's contract, written once in
-- src/limiter/backend.rs).
--
-- The token bucket used as a meter, as redis-cell's CL.THROTTLE and the `governor`
-- crate keep it: one timestamp of state per key, the theoretical arrival time (TAT)
-- of the next request at the rule's rate. A request of cost c advances the TAT by c
-- emission intervals (`refill_ms / refill_tokens` ms each); it is admitted when the TAT
-- then stays within `capacity` intervals of now (a burst of `capacity`, then the rate). With the same
-- parameters it admits exactly what the token bucket admits: the bucket's missing
-- tokens are the TAT's distance ahead of now.
--
-- Exact integers: time is counted in units of 1/refill_tokens ms, so one interval is
-- `refill_ms` units. The hash { tat, part, rt } holds the TAT as whole ms and `part`
-- units (0 <= part < rt), and the `refill_tokens` it was written with. An edit keeps the
-- caller's debt in time (the TAT), converting `part` to the new unit (rounded down);
-- the bucket instead keeps its tokens.
--
-- KEYS[i]          hash of rule i (all keys of a policy share one hash tag)
-- ARGV[1]          now in ms, or "" to read the Redis server clock (TIME)
-- ARGV[2]          unused (the sliding log's request id)
-- ARGV[3]          m: rules 1..m are enforced, m+1..n are shadow rules
-- ARGV[1 + 3i], ARGV[2 + 3i], ARGV[3 + 3i]
--                  capacity, refill_tokens, refill_ms of rule i (all > 0)
-- ARGV[3 + 3n + i] the cost of rule i (> 0; missing: 1)
--
-- Replies (see the contract): admitted {1, t, remaining, next, late, 0, near, shadow,
-- left_1..left_n}, refused {0, r, wait, longest, late}; left_i = the intervals rule i
-- has left within its burst after this request (0 for a shadow rule that would have
-- refused). A wait is the time until the TAT is c - 1 intervals short of the burst; a
-- cost above the capacity never fits, and answers that time all the same (as the token
-- bucket does). redis-cell's answer fields map onto them:
-- limited = the decision, limit = capacity, remaining, retry_after = wait, and
-- reset_after = the key's TTL (the TAT's distance ahead: after it the key is gone and
-- the meter is full).
--
-- A refusal writes nothing at all: a key's TTL is the TAT, which no edit moves.

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

-- Rule i's debt: how many units its TAT is ahead of now (0 when at or behind it).
local debts = {}
local function debt(i, rt)
  local state = redis.call('HMGET', KEYS[i], 'tat', 'part', 'rt')
  local tat = tonumber(state[1])
  local d = 0
  if tat then
    local part = tonumber(state[2]) or 0
    local scale = tonumber(state[3]) or rt
    if scale ~= rt then part = math.floor(part * rt / scale) end
    d = (tat - now) * rt + part
    if d < 0 then d = 0 end
  end
  debts[i] = d
  return d
end

local refusing, wait, longest = 0, 0, 0
local tightest, least = 0, 0
local near = 0
for i = 1, m do
  local capacity = tonumber(ARGV[1 + 3 * i])
  local rt = tonumber(ARGV[2 + 3 * i])
  local rms = tonumber(ARGV[3 + 3 * i])
  local d = debt(i, rt)
  local over = d - (capacity - costs[i]) * rms
  if over > 0 then
    local w = math.floor((over + rt - 1) / rt)
    if refusing == 0 then refusing, wait = i, w end
    if w > longest then longest = w end
  elseif refusing == 0 then
    local left = math.floor((capacity * rms - d - costs[i] * rms) / rms)
    if tightest == 0 or left < least then tightest, least = i, left end
    if (capacity - left) * 5 > capacity * 4 then near = near + 2 ^ (i - 1) end
  end
end

if refusing > 0 then
  return {0, refusing, wait, longest, late}
end

local shadow = 0
local record = {}
for i = 1, n do record[i] = i <= m end
for i = m + 1, n do
  local capacity = tonumber(ARGV[1 + 3 * i])
  local rt = tonumber(ARGV[2 + 3 * i])
  local rms = tonumber(ARGV[3 + 3 * i])
  local d = debt(i, rt)
  if d > (capacity - costs[i]) * rms then
    shadow = shadow + 2 ^ (i - 1)
  else
    record[i] = true
    local left = math.floor((capacity * rms - d - costs[i] * rms) / rms)
    if (capacity - left) * 5 > capacity * 4 then near = near + 2 ^ (i - 1) end
  end
end

local reply = {1, 0, 0, 0, late, 0, 0, 0}
for i = 1, n do
  reply[8 + i] = 0
  if record[i] then
    local rt = tonumber(ARGV[2 + 3 * i])
    local rms = tonumber(ARGV[3 + 3 * i])
    local d = debts[i] + costs[i] * rms
    debts[i] = d
    reply[8 + i] = math.floor((tonumber(ARGV[1 + 3 * i]) * rms - d) / rms)
    local whole = math.floor(d / rt)
    redis.call('HSET', KEYS[i], 'tat', now + whole, 'part', d - whole * rt, 'rt', rt)
    redis.call('PEXPIRE', KEYS[i], math.max(1, math.floor((d + rt - 1) / rt)))
  end
end
local next_ms = 0
if tightest > 0 and least == 0 then
  local capacity = tonumber(ARGV[1 + 3 * tightest])
  local rt = tonumber(ARGV[2 + 3 * tightest])
  local rms = tonumber(ARGV[3 + 3 * tightest])
  next_ms = math.floor((debts[tightest] - (capacity - 1) * rms + rt - 1) / rt)
end
reply[2], reply[3], reply[4], reply[7], reply[8] = tightest, least, next_ms, near, shadow
return reply
