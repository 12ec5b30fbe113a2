-- The distinct keys an edge domain counts under, bounded (src/edge/key_registry.rs).
-- A client chooses descriptor values, and each value is a counter key: without a bound a
-- script with a thousand addresses could create keys without end. The registry is in the
-- domain's slot (its hash tag), so the bound holds across instances, also on a Cluster.
--
-- KEYS[1]          the domain's registry: a sorted set, member = a counter key, score =
--                  the Redis-clock ms until which it counts against the bound
-- ARGV[1]          the most members the registry may hold
-- ARGV[2k], ARGV[2k + 1]
--                  a counter key, and how long (ms, > 0) it stays registered from now
--
-- Reply: 0 when every key is registered (a new one added, a known one kept at least as
-- long as asked), else the 1-based k of the first new key there was no room for: then
-- nothing is written but the removal of members whose time has passed.
-- TTL: the set lives as long as its longest-lived member.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local max = tonumber(ARGV[1])
local count = redis.call('ZCARD', KEYS[1])
for k = 2, #ARGV, 2 do
  if not redis.call('ZSCORE', KEYS[1], ARGV[k]) then
    count = count + 1
    if count > max then return k / 2 end
  end
end
local longest = 0
for k = 2, #ARGV, 2 do
  local ttl = tonumber(ARGV[k + 1])
  -- GT: a known key's time is only ever lengthened; a new key is added.
  redis.call('ZADD', KEYS[1], 'GT', now + ttl, ARGV[k])
  if ttl > longest then longest = ttl end
end
if redis.call('PTTL', KEYS[1]) < longest then
  redis.call('PEXPIRE', KEYS[1], longest)
end
return 0
