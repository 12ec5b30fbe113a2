-- An operator's stock edit, on the Redis side: adds ARGV[1] (negative to lower) to the
-- item's stock counter, unless lowering would take more units than are left (the rest
-- are sold or held by reservations). Bumps the counter's version, so a drift repair the
-- reconciler computed before the edit cannot overwrite it.
--
-- KEYS[1]  the item's stock counter
-- KEYS[2]  the counter's version
-- ARGV[1]  the change (an integer, non-zero)
--
-- Returns {1, stock after}: applied; {0, stock}: refused, fewer than -ARGV[1] units
-- left; {-1, 0}: the counter is missing (Postgres alone decides then).

local stock = redis.call('GET', KEYS[1])
if not stock then return {-1, 0} end
stock = tonumber(stock)
local change = tonumber(ARGV[1])
if change < 0 and stock < -change then return {0, stock} end
local after = redis.call('INCRBY', KEYS[1], change)
redis.call('INCR', KEYS[2])
return {1, after}
