-- Gives a cancelled or expired order's unit back to Redis, exactly once per order, after
-- Postgres has recorded the release (and put the unit back in `items`). The caller marks
-- the order `returned_at` in Postgres afterwards, then drops it from the returning set;
-- a crash between the two leaves the order for the next sweep, whose call here finds the
-- order in the returned set and does nothing.
--
-- The returning set says "Redis has this unit back, Postgres may not know yet": the
-- reconciler reads it with its snapshot of the counter and does not count those orders
-- as holding a unit, so a round landing between this script and the Postgres mark sees
-- the two stores agree (it would otherwise take the unit away again).
--
-- KEYS[1]  stock counter          KEYS[2]  buyers set
-- KEYS[3]  success counter        KEYS[4]  the user's success marker
-- KEYS[5]  orders hash (user -> order id)
-- KEYS[6]  the stock counter's version (bumped with every write to the counter)
-- KEYS[7]  orders already given back (set of order ids): at most once each
-- KEYS[8]  orders given back whose Postgres mark may still be missing (set of order ids)
-- ARGV[1]  user id
-- ARGV[2]  order id
-- ARGV[3]  "rebuy": the buyer mark goes too, so the shopper may buy again;
--          "keep_buyer": the shopper keeps the mark and cannot
-- ARGV[4]  when the item's keys expire, ms since the epoch (the two sets get it too)
--
-- Returns 1 when given back, 0 when it had been already, -1 when the item's keys are
-- gone: the stock counter is missing (Redis lost its data, or the keys expired) or
-- their lifetime is over. Nothing is written then; the caller rebuilds an item still on
-- sale from Postgres and asks again, and records an ended item's unit in Postgres alone.

local user, order, expire_at = ARGV[1], ARGV[2], tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now >= expire_at or not redis.call('GET', KEYS[1]) then
  return -1
end
if redis.call('SADD', KEYS[7], order) == 0 then
  return 0
end
redis.call('SADD', KEYS[8], order)
redis.call('PEXPIREAT', KEYS[7], expire_at)
redis.call('PEXPIREAT', KEYS[8], expire_at)
redis.call('INCR', KEYS[1])
redis.call('INCR', KEYS[6])
if tonumber(redis.call('GET', KEYS[3]) or '0') > 0 then
  redis.call('DECR', KEYS[3])
end
if redis.call('HGET', KEYS[5], user) == order then
  redis.call('HDEL', KEYS[5], user)
end
if ARGV[3] == 'rebuy' then
  redis.call('SREM', KEYS[2], user)
  if redis.call('GET', KEYS[4]) == order then
    redis.call('DEL', KEYS[4])
  end
end
return 1
