-- Appends one instance's second to the history stream (the stats flush, once a
-- second; see src/stats/recorder.rs), unless the stream is at its cap: then the record
-- is dropped, never an older one, which may not be folded yet (Redis 7.0 has no trim
-- that spares unacknowledged entries).
--
-- KEYS[1]  the stream (`stats::record::stream_key`: under `{stats}`, the buckets' slot)
-- ARGV[1]  the cap, in records (`history.stream_max_len`, at least 1)
-- ARGV[2]  the record, JSON (`stats::record::SecondRecord`), stored in field `r`
--
-- Returns {appended, length}: appended 1, or 0 when the stream held `cap` records or
-- more and nothing was written; length, the stream's XLEN after.
local cap = tonumber(ARGV[1])
local length = redis.call('XLEN', KEYS[1])
if length >= cap then
  return {0, length}
end
redis.call('XADD', KEYS[1], 'MAXLEN', cap, '*', 'r', ARGV[2])
return {1, length + 1}
