-- The reconciler's drift repair, as a compare-and-set: if anything wrote the stock
-- counter since the reconciler read it (a reservation, an undo, another repair: each
-- bumps the version), that write wins and the repair waits for the next round.
-- Comparing the version, not the value: a value can come back (one unit taken, another
-- returned) while the reservations behind it changed.
--
-- The buyers set and the success counter are rewritten only when the reconciler read
-- no pending reservation (then Postgres's orders say exactly what they must be). A
-- purchase can only change them after a reservation, which bumps the version, or
-- while one is pending, which the reconciler would have seen.
--
-- KEYS[1]  stock counter
-- KEYS[2]  the counter's version (missing = 0)
-- KEYS[3]  buyers set
-- KEYS[4]  success counter
-- KEYS[5]  the item's stock-edit marker: while an operator's stock edit runs (its
--          Postgres and Redis steps are two), a repair computed from either side alone
--          would undo half of it; the repair waits for the next round
-- ARGV[1]  the version the reconciler read
-- ARGV[2]  the stock it computed from Postgres
-- ARGV[3]  the number of orders in Postgres (the success counter), or "" to leave the
--          buyers and the counter alone
-- ARGV[4…] the users holding an order (the buyers set), when ARGV[3] is set
--
-- Returns 1 when written (and the version bumped), 0 when the counter had moved.

if tonumber(redis.call('GET', KEYS[2]) or '0') ~= tonumber(ARGV[1]) then
  return 0
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('INCR', KEYS[2])
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[4], ARGV[3])
  redis.call('DEL', KEYS[3])
  -- unpack() is bounded by Lua's C stack: add the buyers in slices.
  for first = 4, #ARGV, 4000 do
    redis.call('SADD', KEYS[3], unpack(ARGV, first, math.min(first + 3999, #ARGV)))
  end
end
return 1
