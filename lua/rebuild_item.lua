-- Rebuilds an item's stock counter and buyers from Postgres when the counter is missing
-- (Redis lost its data, a fresh Redis, a new key prefix). A live counter is never
-- overwritten. Atomic with the give-backs (`give_back.lua`), so the released orders
-- Postgres still lists as owed are counted exactly: those this Redis already gave back
-- (in the returned set) are in the counter, the others are not (their give-back, which
-- finds the counter again, adds them).
--
-- KEYS[1]  stock counter          KEYS[2]  buyers set
-- KEYS[3]  orders already given back (set of order ids, see give_back.lua)
-- KEYS[4]  the stock counter's version
-- ARGV[1]  Postgres's remaining units (`items.remaining_stock`, released units included)
-- ARGV[2]  when the item's keys expire, ms since the epoch
-- ARGV[3]  n: how many released orders Postgres has not marked returned
-- ARGV[4 … 3+2n]   those orders as pairs: order id, user id
-- ARGV[4+2n …]     users holding a live order (without rebuys: everyone who ever ordered)
--
-- Returns 1 when the counter was (re)created, 0 when it existed (nothing written).

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local expire_at = ARGV[2]
local owed = tonumber(ARGV[3])
local stock = tonumber(ARGV[1])
local holders = {}
for i = 0, owed - 1 do
  local order, user = ARGV[4 + 2 * i], ARGV[5 + 2 * i]
  if redis.call('SISMEMBER', KEYS[3], order) == 0 then
    -- Not given back here yet: its unit is not on sale in Redis, its buyer still bought.
    stock = stock - 1
    holders[#holders + 1] = user
  end
end
redis.call('SET', KEYS[1], stock)
redis.call('PEXPIREAT', KEYS[1], expire_at)
redis.call('INCR', KEYS[4])
redis.call('PEXPIREAT', KEYS[4], expire_at)
local first = 4 + 2 * owed
-- unpack() is bounded by Lua's C stack: add the buyers in slices.
for from = first, #ARGV, 4000 do
  redis.call('SADD', KEYS[2], unpack(ARGV, from, math.min(from + 3999, #ARGV)))
end
for from = 1, #holders, 4000 do
  redis.call('SADD', KEYS[2], unpack(holders, from, math.min(from + 3999, #holders)))
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('PEXPIREAT', KEYS[2], expire_at)
end
return 1
