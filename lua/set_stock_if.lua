-- Compare-and-set of a stock counter, for the reconciler's drift repair: a purchase that
-- moved the counter since the reconciler read it wins, and the repair waits for the
-- next round.
--
-- KEYS[1]  stock counter
-- ARGV[1]  the value the reconciler read
-- ARGV[2]  the value it computed from Postgres
--
-- Returns 1 when set, 0 when the counter had moved.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
