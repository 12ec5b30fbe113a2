-- One instance's heartbeat: the limiter's fallback shares each rule among the instances
-- alive (see src/limiter/peers.rs).
-- KEYS[1]  the instances' sorted set (member: instance tag, score: last beat, ms)
-- ARGV[1]  this instance's tag
-- ARGV[2]  how long a beat counts, ms
-- Returns how many instances beat within that time, this one included.
-- On Redis's clock, so instances whose clocks disagree still agree on who is alive.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return redis.call('ZCARD', KEYS[1])
