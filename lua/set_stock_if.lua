-- Compare-and-set of a stock counter, for the reconciler's drift repair: if anything
-- wrote the counter since the reconciler read it (a reservation, an undo, another
-- repair: each bumps the version), that write wins and the repair waits for the next
-- round. Comparing the version, not the value: a value can come back (one unit taken,
-- another returned) while the reservations behind it changed.
--
-- KEYS[1]  stock counter
-- KEYS[2]  the counter's version (missing = 0)
-- ARGV[1]  the version the reconciler read
-- ARGV[2]  the value it computed from Postgres
--
-- Returns 1 when set (and the version bumped), 0 when the counter had moved.

if tonumber(redis.call('GET', KEYS[2]) or '0') == tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('INCR', KEYS[2])
  return 1
end
return 0
