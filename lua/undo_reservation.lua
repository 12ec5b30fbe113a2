-- Undoes a reservation whose order was not committed, so that Redis agrees with Postgres
-- again. Used by the purchase path after a failed commit and by the reconciler for
-- reservations abandoned by a crash.
--
-- At most once per reservation: the undo happens only if the reservation is still
-- pending (its member is removed here), so the purchase path and the reconciler can
-- never both give the unit back. Only this attempt's own writes are undone: the marker
-- and the order hash entry are touched only while they hold this attempt's order id
-- (which is also how the script knows the success pipeline ran).
--
-- KEYS[1]  stock counter          KEYS[2]  buyers set
-- KEYS[3]  success counter        KEYS[4]  the user's success marker
-- KEYS[5]  orders hash (user -> order id)
-- KEYS[6]  pending reservations (sorted set, member "<user>:<order id>")
-- KEYS[7]  the stock counter's version (bumped with every write to the counter, so the
--          reconciler's drift repair sees that it moved)
-- ARGV[1]  user id
-- ARGV[2]  this attempt's order id
-- ARGV[3]  mode:
--            "whole"       stock back, buyer mark removed (no order was made)
--            "keep_buyer"  stock back, buyer mark kept (Postgres already has an
--                          order of this user: the unit was never theirs to take)
--            "sold_out"    stock set to 0, buyer mark removed (Postgres had no unit left)
-- ARGV[4]  the user's existing order id (mode keep_buyer), or ""
--
-- Returns 1 when undone, 0 when the reservation was no longer pending (nothing done).

local user, order, mode, existing = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if redis.call('ZREM', KEYS[6], user .. ':' .. order) == 0 then
  return 0
end
if mode == 'sold_out' then
  redis.call('SET', KEYS[1], 0)
  redis.call('INCR', KEYS[7])
else
  redis.call('INCR', KEYS[1])
  redis.call('INCR', KEYS[7])
end
if mode ~= 'keep_buyer' then
  redis.call('SREM', KEYS[2], user)
end
if redis.call('HGET', KEYS[5], user) == order then
  if tonumber(redis.call('GET', KEYS[3]) or '0') > 0 then
    redis.call('DECR', KEYS[3])
  end
  if existing ~= '' then redis.call('HSET', KEYS[5], user, existing) else redis.call('HDEL', KEYS[5], user) end
end
if redis.call('GET', KEYS[4]) == order then
  if existing ~= '' then redis.call('SET', KEYS[4], existing, 'KEEPTTL') else redis.call('DEL', KEYS[4]) end
end
return 1
