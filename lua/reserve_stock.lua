-- Reserves one unit of an item for one user, atomically, and records the reservation as
-- pending until its order is committed (or the reconciler settles it).
--
-- The sale window is checked against the Redis clock, not the caller's: an instance
-- whose clock runs ahead cannot open the sale early.
--
-- KEYS[1]  the item's stock counter (string holding an integer)
-- KEYS[2]  the item's buyers (set of user ids)
-- KEYS[3]  the item's pending reservations (sorted set: member "<user>:<order id>",
--          score = deadline in ms on the Redis clock)
-- KEYS[4]  the stock counter's version (bumped with the counter, so the reconciler's
--          drift repair sees that it moved)
-- KEYS[5]  the item's waiting room's live passes (sorted set of places; see
--          `lua/room_admit.lua`): the pass this purchase offered stops counting there
-- KEYS[6]  the item's room gate (hash: version, on; see `lua/room_gate.lua`): whether
--          the item sells through its waiting room. Read here, in the reservation's
--          own step, so an operator's change holds on every instance from its 200 on,
--          whatever an instance's copy of the settings says
-- ARGV[1]  user id
-- ARGV[2]  sale start, ms since the epoch
-- ARGV[3]  sale end, ms since the epoch (exclusive)
-- ARGV[4]  the order id this reservation is for
-- ARGV[5]  how long (ms) the reservation may stay pending before the reconciler
--          looks for its order in Postgres
-- ARGV[6]  the place of the valid queue pass the purchase offered (its signature, kind,
--          user, item and expiry checked by the caller), or '' when it offered none.
--          A pass buys at most once because it names its user, and a user buys an item
--          once (KEYS[2]); marking it used here, in the reservation's own step, means
--          an answer that sold nothing (429, 503, sold out) never spends it.
--
-- Returns {status, remaining}:
--    1  reserved; remaining = stock left after this unit
--   -1  the sale has not started (Redis clock)
--   -2  the sale has ended (Redis clock)
--   -3  this user already bought this item
--   -4  sold out
--   -5  the stock counter or the room gate is missing (Redis lost it): rebuild from
--       Postgres, then retry. A lost gate never reads as "no room"
--   -6  the item's waiting room is on and no valid pass was offered: nothing written

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(ARGV[2]) then return {-1, 0} end
if now >= tonumber(ARGV[3]) then return {-2, 0} end
local gated = redis.call('HGET', KEYS[6], 'on')
if not gated then return {-5, 0} end
if gated == '1' and ARGV[6] == '' then return {-6, 0} end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return {-3, 0} end
local stock = redis.call('GET', KEYS[1])
if not stock then return {-5, 0} end
if tonumber(stock) <= 0 then return {-4, 0} end
local left = redis.call('DECR', KEYS[1])
redis.call('INCR', KEYS[4])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[5]), ARGV[1] .. ':' .. ARGV[4])
if ARGV[6] ~= '' then redis.call('ZREM', KEYS[5], ARGV[6]) end
return {1, left}
