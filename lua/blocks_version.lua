-- The operator's blocks' version (see src/history/blocks.rs): a change announces its
-- version, and every instance records the version it applied, in one call each.
-- KEYS[1]  the version key: the newest change's id (block_audit.id)
-- KEYS[2]  this instance's applied key
-- ARGV[1]  a version to announce: the key is raised to it, never lowered (0: none)
-- ARGV[2]  the version this instance has applied (-1: none to record)
-- ARGV[3]  how long the applied key lives, ms (refreshed by every poll)
-- Returns the version now (0 when none was ever announced).
local current = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local announced = tonumber(ARGV[1])
if announced > current then
  redis.call('SET', KEYS[1], announced)
  current = announced
end
if tonumber(ARGV[2]) >= 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return current
