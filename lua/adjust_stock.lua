-- An operator's stock edit, on the Redis side: adds ARGV[1] (negative to lower) to the
-- item's stock counter, unless lowering would take more units than are left (the rest
-- are sold or held by reservations). Bumps the counter's version, so a drift repair the
-- reconciler computed before the edit cannot overwrite it. A raise reopens the item's
-- waiting room if it was closed (sold out for good, `lua/room_close.lua`), in the same
-- step: every instance's joins accept from the edit's 200 on.
--
-- KEYS[1]  the item's stock counter
-- KEYS[2]  the counter's version
-- KEYS[3]  the item's waiting room's state hash (its `closed_at`)
-- ARGV[1]  the change (an integer, non-zero)
--
-- Returns {1, stock after, closed_at}: applied, and the room's `closed_at` (ms) when
-- this raise reopened it, else 0; {0, stock, 0}: refused, fewer than -ARGV[1] units
-- left; {-1, 0, 0}: the counter is missing (Postgres alone decides then).

local stock = redis.call('GET', KEYS[1])
if not stock then return {-1, 0, 0} end
stock = tonumber(stock)
local change = tonumber(ARGV[1])
if change < 0 and stock < -change then return {0, stock, 0} end
local after = redis.call('INCRBY', KEYS[1], change)
redis.call('INCR', KEYS[2])
local reopened = 0
if change > 0 and after > 0 then
  reopened = tonumber(redis.call('HGET', KEYS[3], 'closed_at') or 0)
  if reopened > 0 then redis.call('HDEL', KEYS[3], 'closed_at') end
end
return {1, after, reopened}
