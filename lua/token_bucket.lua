-- Token bucket over N rules, all-or-nothing, a cost per rule.
--
-- Each rule keeps a hash { tokens, refilled_at, scale }. Tokens refill continuously at
-- `refill_tokens` per `refill_ms` up to `capacity`. To keep the arithmetic in exact
-- integers (Lua numbers are doubles; fractions drift), `tokens` is stored scaled by
-- `refill_ms`: one whole token = `refill_ms` units, and each elapsed millisecond adds
-- `refill_tokens` units. A missing key is a full bucket.
--
-- Rules change at run time. `scale` is the `refill_ms` that `tokens` was written with:
-- when it differs from the rule's, the stored level is converted to the new scale first,
-- keeping its number of tokens (rounded down to a unit), and the new rule then applies
-- from `refilled_at` on (refill rate; capacity caps the level). A key without `scale`
-- (written before it existed) is read in the rule's scale.
--
-- A request of cost c takes c tokens: it is admitted only if EVERY rule holds at least
-- its cost in tokens; otherwise no level and no time is written (at most a TTL, see
-- below).
--
-- KEYS[i]          hash of rule i (all keys of a policy share one hash tag)
-- ARGV[1]          now in ms, or "" to read the Redis server clock (TIME)
-- ARGV[2]          unused (the sliding log's request id)
-- ARGV[3]          m: rules 1..m are enforced, m+1..n are shadow rules (see below)
-- ARGV[1 + 3i], ARGV[2 + 3i], ARGV[3 + 3i]
--                  capacity, refill_tokens, refill_ms of rule i (all > 0)
-- ARGV[3 + 3n + i] the cost of rule i (> 0; missing: 1)
--
-- Returns exactly what the response headers and the denial cache need (the contract
-- every algorithm's script keeps, in src/limiter/backend.rs):
--   admitted: {1, t, remaining, next, late, 0, near, shadow, left_1..left_n}
--                                 t = the rule with the fewest whole tokens left after
--                                 this request (1-based; the first on ties), remaining =
--                                 that count, next = when remaining is 0, ms until t holds
--                                 a token again, else 0
--   refused:  {0, r, wait, longest, late}
--                                 r = the first refusing rule (1-based), wait = ms until
--                                 it holds the request's cost in tokens (a cost above
--                                 the capacity never fits: its wait is the refill of
--                                 that many tokens all the same), longest = the longest
--                                 wait among all refusing rules
--   left_i = whole tokens rule i holds after this request (0 for a shadow rule that
--          would have refused)
--   late = µs past the millisecond the Redis clock read (0 with ARGV[1]): waits are
--          whole milliseconds from that millisecond, so the caller (the denial cache)
--          subtracts it to know exactly when they end
--   0    = the delay a shaper asks for (this algorithm never delays)
--   near = bit i-1 set: rule i is left with less than 20 % of its capacity in whole
--          tokens (envoy's near_limit)
--   shadow = bit i-1 set: shadow rule i would have refused
--
-- Shadow rules (m+1..n) see only what the enforced rules admitted, and decide it as
-- they would if enforced: one holding the cost spends it, one without writes nothing
-- and sets its bit. They are never named as a refusing rule.
--
-- On admission each key's TTL is the time it takes to refill completely: after that a
-- missing key and a full bucket are the same thing. The one write a refusal may make:
-- after a rule edit slowed the refill (or raised the capacity), a key that meets only
-- refusals would keep its old, shorter TTL and come back full too soon, so a refused
-- call extends the TTL of each stored, not full bucket it read when the TTL falls short
-- of its refill time by more than 1 % of the time to fill an empty bucket (at least
-- 2 ms). Smaller shortfalls are clock noise (the millisecond TIME was read in; app
-- clocks of different instances). With steady rules and the Redis clock a refusal
-- writes nothing.
--
-- `refilled_at` never moves back: a caller whose clock is behind it gets no refill and
-- waits from the bucket's time. An empty bucket refills c tokens within
-- ceil(c * refill_ms / refill_tokens) ms, so once a refusal is known and the longest
-- wait so far covers that, a later rule cannot change the reply and is skipped.

local n = #KEYS
local m = tonumber(ARGV[3])
local costs = {}
for i = 1, n do costs[i] = tonumber(ARGV[3 + 3 * n + i]) or 1 end
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

-- `level` units of 1/`from` token as units of 1/`to` token, rounded down (never more
-- than was stored). Whole tokens and the fraction are converted apart, so the products
-- stay exact (below 2^53) for periods up to ~2^26 ms each; beyond that the fraction may
-- be off by a unit, never by a token.
local function rescale(level, from, to)
  local whole = math.floor(level / from)
  local part = math.floor((level - whole * from) * to / from)
  if part >= to then part = to - 1 end
  return whole * to + part
end

local refusing, wait, longest = 0, 0, 0
local tightest, least = 0, 0
-- Pass 1 reads only; the levels and the buckets' times are kept for pass 2, and for a
-- refusal's TTL check, each stored bucket's time to refill completely (ms from now).
local levels, stamps, refills = {}, {}, {}
-- With app clocks (ARGV[1] set), another instance's clock may be ahead of this one: a
-- bucket's time never moves back (or the ahead instance would refill the skew again on
-- its next call), so waits count from the bucket's time, and no rule can be skipped.
local skewed = ARGV[1] ~= ''
local near = 0

-- Reads rule i's level and time (into `levels`, `stamps`, `refills`).
local function read(i, capacity, refill_tokens, refill_ms)
  local full = capacity * refill_ms
  local state = redis.call('HMGET', KEYS[i], 'tokens', 'refilled_at', 'scale')
  local level = tonumber(state[1])
  local at = tonumber(state[2])
  if level == nil or at == nil then
    level, at = full, now
  else
    local scale = tonumber(state[3])
    if scale and scale ~= refill_ms then level = rescale(level, scale, refill_ms) end
    local elapsed = now - at
    if elapsed > 0 then level = level + elapsed * refill_tokens end
    if level > full then level = full end
    if at < now then at = now end
    refills[i] = (at - now) + math.floor((full - level + refill_tokens - 1) / refill_tokens)
  end
  levels[i], stamps[i] = level, at
end

for i = 1, m do
  local capacity = tonumber(ARGV[1 + 3 * i])
  local refill_tokens = tonumber(ARGV[2 + 3 * i])
  local refill_ms = tonumber(ARGV[3 + 3 * i])
  local need = costs[i] * refill_ms
  if refusing == 0 or skewed
      or longest < math.floor((need + refill_tokens - 1) / refill_tokens) then
    read(i, capacity, refill_tokens, refill_ms)
    local level, at = levels[i], stamps[i]
    if level < need then
      -- ceil((need - level) / refill_tokens) in integers, from the bucket's time
      local w = (at - now) + math.floor((need - level + refill_tokens - 1) / refill_tokens)
      if refusing == 0 then refusing, wait = i, w end
      if w > longest then longest = w end
    elseif refusing == 0 then
      local left = math.floor(level / refill_ms) - costs[i]
      if tightest == 0 or left < least then tightest, least = i, left end
      if (capacity - left) * 5 > capacity * 4 then near = near + 2 ^ (i - 1) end
    end
  end
end

-- A key read that is not yet full keeps its level until it refills, though an edit
-- slowed the refill after the key's TTL was set.
local function keep(i)
  if refills[i] and refills[i] > 0 then
    local ttl = redis.call('PTTL', KEYS[i])
    local refill_tokens = tonumber(ARGV[2 + 3 * i])
    local empty = math.floor((tonumber(ARGV[1 + 3 * i]) * tonumber(ARGV[3 + 3 * i])
      + refill_tokens - 1) / refill_tokens)
    if ttl >= 0 and refills[i] - ttl > math.max(2, math.floor(empty / 100)) then
      redis.call('PEXPIRE', KEYS[i], refills[i])
    end
  end
end

if refusing > 0 then
  -- Nothing is written; only a TTL that falls short of the refill (see the header),
  -- shadow rules' too: nothing else extends them while the enforced rules refuse.
  for i = 1, m do keep(i) end
  for i = m + 1, n do
    read(i, tonumber(ARGV[1 + 3 * i]), tonumber(ARGV[2 + 3 * i]), tonumber(ARGV[3 + 3 * i]))
    keep(i)
  end
  return {0, refusing, wait, longest, late}
end

-- Every enforced rule admits; each shadow rule decides as if enforced.
local shadow = 0
local record = {}
for i = 1, n do record[i] = i <= m end
for i = m + 1, n do
  local capacity = tonumber(ARGV[1 + 3 * i])
  local refill_ms = tonumber(ARGV[3 + 3 * i])
  read(i, capacity, tonumber(ARGV[2 + 3 * i]), refill_ms)
  if levels[i] < costs[i] * refill_ms then
    shadow = shadow + 2 ^ (i - 1)
    keep(i)
  else
    record[i] = true
    local left = math.floor(levels[i] / refill_ms) - costs[i]
    if (capacity - left) * 5 > capacity * 4 then near = near + 2 ^ (i - 1) end
  end
end

local reply = {1, 0, 0, 0, late, 0, 0, 0}
for i = 1, n do
  reply[8 + i] = 0
  if record[i] then
    local capacity = tonumber(ARGV[1 + 3 * i])
    local refill_tokens = tonumber(ARGV[2 + 3 * i])
    local refill_ms = tonumber(ARGV[3 + 3 * i])
    local level = levels[i] - costs[i] * refill_ms
    reply[8 + i] = math.floor(level / refill_ms)
    redis.call('HSET', KEYS[i], 'tokens', level, 'refilled_at', stamps[i], 'scale', refill_ms)
    local ttl = (stamps[i] - now)
      + math.floor((capacity * refill_ms - level + refill_tokens - 1) / refill_tokens)
    if ttl < 1 then ttl = 1 end
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end
local next_ms = 0
if tightest > 0 and least == 0 then
  local refill_tokens = tonumber(ARGV[2 + 3 * tightest])
  local refill_ms = tonumber(ARGV[3 + 3 * tightest])
  local after = levels[tightest] - costs[tightest] * refill_ms
  next_ms = (stamps[tightest] - now)
    + math.floor((refill_ms - after + refill_tokens - 1) / refill_tokens)
end
reply[2], reply[3], reply[4], reply[7], reply[8] = tightest, least, next_ms, near, shadow
return reply
