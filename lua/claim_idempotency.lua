-- Claims an Idempotency-Key for one purchase, atomically, and caps how many purchases
-- of one user may be in flight at once.
--
-- A claim lives only as long as a purchase can (reservation deadline + commit timeout):
-- if its request dies, the key frees itself soon instead of answering "in progress" for
-- a day. The final answer, stored by the caller, gets the long TTL. The user's in-flight
-- set holds one member per live claim, scored by its expiry, so claims of dead requests
-- stop counting when they expire.
--
-- KEYS[1]  the key's record (string): "p|<item>|<order id>|<claimed at, ms>" while in
--          progress, "d|<item>|<status>|<body>" when done
-- KEYS[2]  the user's in-flight claims (sorted set: member KEYS[1], score = expiry ms);
--          same hash tag as KEYS[1]
-- ARGV[1]  "<item>|<order id>": what this request will do
-- ARGV[2]  claim TTL in ms
-- ARGV[3]  most claims one user may hold at once
--
-- Returns {status, previous record or "", now ms on the Redis clock}:
--    1  claimed: go ahead
--    0  the key exists: previous record returned (in progress, done, or another item)
--   -1  refused: the user already holds ARGV[3] live claims

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local previous = redis.call('GET', KEYS[1])
if previous then return {0, previous, now} end
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return {-1, '', now} end
redis.call('SET', KEYS[1], 'p|' .. ARGV[1] .. '|' .. now, 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, KEYS[1])
redis.call('PEXPIRE', KEYS[2], ttl)
return {1, '', now}
