-- Failed admin sign-ins of one address, counted so that no burst can outrun them.
--
-- An attempt first reserves a place ("reserve"), and only then is its token compared;
-- it ends with "release" (the token was right: the place is given back) or "fail" (the
-- token was wrong: the place becomes a recorded failure). Places are refused while
-- recorded failures plus attempts in flight reach the limit, so at most `limit` wrong
-- tokens are ever compared per lockout window, however many arrive at once.
--
-- Keys live at most a lockout window (failures) or a lease (attempts in flight), and the
-- in-flight set holds at most `limit` members: a process that dies between "reserve"
-- and its settling call leaves a place that expires with its lease.
--
-- KEYS[1]  recorded failures (string holding an integer); its TTL is the lockout: set
--          to the window by the first failure, set again to the full window by the
--          failure that reaches the limit, kept otherwise
-- KEYS[2]  attempts in flight (sorted set: member = attempt id, score = the lease's
--          deadline in ms)
-- ARGV[1]  operation: "reserve", "release" or "fail"
-- ARGV[2]  the attempt id (unique per attempt)
-- ARGV[3]  the limit: failures that lock the address out
-- ARGV[4]  the lockout window, ms
-- ARGV[5]  the lease of an attempt in flight, ms
-- ARGV[6]  now in ms since the epoch, or "" to read the Redis clock
--
-- Returns {status, wait_ms}:
--   reserve   { 1, 0}     reserved: compare the token, then "release" or "fail"
--             { 0, wait}  refused: the address is locked out for `wait` ms more, or
--                         (failures below the limit) places are taken by attempts in
--                         flight; wait = the sooner of 1 s and the earliest lease end
--   release   { 1, 0}
--   fail      { n, wait}  n = failures now recorded; wait = the lockout's ms when n
--                         reached the limit, else 0

local now
if ARGV[6] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[6])
end
local limit = tonumber(ARGV[3])
local window = tonumber(ARGV[4])

if ARGV[1] == 'release' then
  redis.call('ZREM', KEYS[2], ARGV[2])
  return {1, 0}
end

if ARGV[1] == 'fail' then
  redis.call('ZREM', KEYS[2], ARGV[2])
  local failures = redis.call('INCR', KEYS[1])
  if failures == 1 or failures == limit or redis.call('PTTL', KEYS[1]) < 0 then
    redis.call('PEXPIRE', KEYS[1], window)
  end
  if failures >= limit then
    return {failures, redis.call('PTTL', KEYS[1])}
  end
  return {failures, 0}
end

-- reserve
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local failures = tonumber(redis.call('GET', KEYS[1]) or '0')
if failures >= limit then
  local wait = redis.call('PTTL', KEYS[1])
  if wait < 0 then
    -- A count without a lockout (it cannot be made so by this script): lock it now.
    redis.call('PEXPIRE', KEYS[1], window)
    wait = window
  end
  return {0, math.max(wait, 1)}
end
if failures + redis.call('ZCARD', KEYS[2]) >= limit then
  local earliest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {0, math.max(math.min(1000, tonumber(earliest[2]) - now), 1)}
end
local lease = tonumber(ARGV[5])
redis.call('ZADD', KEYS[2], now + lease, ARGV[2])
redis.call('PEXPIRE', KEYS[2], lease)
return {1, 0}
