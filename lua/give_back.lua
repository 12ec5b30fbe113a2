-- Gives a cancelled or expired order's unit back to Redis, exactly once per order, after
-- Postgres has recorded the release (and put the unit back in `items`). The caller marks
-- the order `returned_at` in Postgres afterwards; a crash between the two leaves the
-- order for the next sweep, whose call here finds the order in the returned set and does
-- nothing.
--
-- KEYS[1]  stock counter          KEYS[2]  buyers set
-- KEYS[3]  success counter        KEYS[4]  the user's success marker
-- KEYS[5]  orders hash (user -> order id)
-- KEYS[6]  the stock counter's version (bumped with every write to the counter)
-- KEYS[7]  orders already given back (set of order ids, expires ARGV[4] ms after the
--          last give-back: long after Postgres has marked them returned)
-- ARGV[1]  user id
-- ARGV[2]  order id
-- ARGV[3]  "rebuy": the buyer mark goes too, so the shopper may buy again;
--          "keep_buyer": the shopper keeps the mark and cannot
-- ARGV[4]  how long the returned set is kept, ms
--
-- Returns 1 when given back, 0 when it had been already, -1 when the stock counter is
-- missing (Redis lost its data: the rebuild from Postgres, which counts this order as
-- still holding its unit, comes first; the give-back is retried after it).

local user, order = ARGV[1], ARGV[2]
if not redis.call('GET', KEYS[1]) then
  return -1
end
if redis.call('SADD', KEYS[7], order) == 0 then
  return 0
end
redis.call('PEXPIRE', KEYS[7], ARGV[4])
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
