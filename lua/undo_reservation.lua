-- Undoes a reservation whose Postgres commit did not happen, so that Redis agrees with
-- Postgres again. Only writes made by THIS attempt are undone: the marker and the order
-- hash entry are touched only while they still hold this attempt's order id.
--
-- KEYS[1]  stock counter          KEYS[2]  buyers set
-- KEYS[3]  success counter        KEYS[4]  the user's success marker
-- KEYS[5]  orders hash (user -> order id)
-- ARGV[1]  user id
-- ARGV[2]  this attempt's order id
-- ARGV[3]  mode:
--            "release"     stock back, buyer mark removed (the commit failed)
--            "keep_buyer"  stock back, buyer mark kept (Postgres already has an
--                          order of this user: the unit was never theirs to take)
--            "sold_out"    stock set to 0, buyer mark removed (Postgres had no unit left)
-- ARGV[4]  "1" when the success pipeline (counter, marker, hash) ran, else "0"
-- ARGV[5]  the user's existing order id (mode keep_buyer), or ""
--
-- Returns 1.

local user, order, mode = ARGV[1], ARGV[2], ARGV[3]
if mode == 'sold_out' then
  redis.call('SET', KEYS[1], 0)
else
  redis.call('INCR', KEYS[1])
end
if mode ~= 'keep_buyer' then
  redis.call('SREM', KEYS[2], user)
end
if ARGV[4] == '1' then
  if tonumber(redis.call('GET', KEYS[3]) or '0') > 0 then
    redis.call('DECR', KEYS[3])
  end
  local existing = ARGV[5]
  if redis.call('GET', KEYS[4]) == order then
    if existing ~= '' then redis.call('SET', KEYS[4], existing, 'KEEPTTL') else redis.call('DEL', KEYS[4]) end
  end
  if redis.call('HGET', KEYS[5], user) == order then
    if existing ~= '' then redis.call('HSET', KEYS[5], user, existing) else redis.call('HDEL', KEYS[5], user) end
  end
end
return 1
