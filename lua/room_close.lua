-- Closes an item's waiting room for good once no unit can come back, or reopens it once
-- units are back (an operator raised the stock, the reconciler repaired the counter).
-- Run by the inlet (`sale::room::inlet`) every second, after its read of the unpaid
-- orders in Postgres.
--
-- The race it guards: a unit comes back when an unpaid order is cancelled or expires,
-- and a reservation becomes an unpaid order when the committer writes it. So the caller
-- reads the stock counter's version and the reservations in flight (step A), then
-- Postgres, then calls here: an unchanged version means no reservation, give-back or
-- edit ran since A, and none in flight at A means Postgres had every order when it was
-- read. Then "no unpaid order" is still true here.
--
-- KEYS[1]  the room's state hash (`closed_at`, ms, once closed)
-- KEYS[2]  the item's stock counter
-- KEYS[3]  the stock counter's version (bumped with every write to the counter)
-- KEYS[4]  the item's reservations in flight (sorted set)
-- KEYS[5]  the room's live passes (sorted set, score: the pass's expiry, ms)
-- ARGV[1]  the version read at step A
-- ARGV[2]  1 when step A saw no reservation in flight and Postgres no unpaid order and
--          no unit on its way back (cancelled or expired, not yet returned); else 0
-- ARGV[3]  now, ms
-- ARGV[4]  when the room's keys expire, ms
--
-- Returns the room's `closed_at` (ms) after the call, or 0 when it is open. Nothing is
-- written when the stock counter is missing (Redis lost it: the rebuild comes first).

local room = KEYS[1]
local stock = redis.call('GET', KEYS[2])
local closed = tonumber(redis.call('HGET', room, 'closed_at') or 0)
if not stock then return closed end
if tonumber(stock) > 0 then
  if closed > 0 then redis.call('HDEL', room, 'closed_at') end
  return 0
end
if closed > 0 then return closed end
local now = tonumber(ARGV[3])
if ARGV[2] ~= '1'
    or (redis.call('GET', KEYS[3]) or '0') ~= ARGV[1]
    or redis.call('ZCARD', KEYS[4]) > 0
    or redis.call('ZCOUNT', KEYS[5], now, '+inf') > 0 then
  return 0
end
redis.call('HSET', room, 'closed_at', now)
redis.call('PEXPIREAT', room, ARGV[4])
return now
