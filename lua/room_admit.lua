-- One step of the inlet: admits the places from the serving position on, in order,
-- skipping those whose shopper has not been heard of for ARGV[3] ms, until ARGV[5]
-- are admitted or the candidates run out. Each admitted place gets a pass slot in the
-- live set until its expiry; expired slots are freed first. Runs only if the serving
-- position is still ARGV[1] (compare-and-set: two instances running the inlet at once
-- cannot admit a place twice).
--
-- KEYS[1..6]  the room's keys (`ItemKeys::room_wide`): state hash, members, rounds,
--             steps, alive, live
-- ARGV[1]     the serving position the caller read
-- ARGV[2]     now, ms
-- ARGV[3]     abandon after, ms
-- ARGV[4]     a pass's lifetime, ms
-- ARGV[5]     admit at most this many
-- ARGV[6]     the admission credit before this step (stored minus what is admitted)
-- ARGV[7]     when the room's keys expire, ms
-- ARGV[8..]   candidates: place, join index, place, join index, ... (consecutive
--             places from ARGV[1], placed ones only)
--
-- Returns {admitted (-1: the position moved), new serving position, skipped}.

local room = KEYS[1]
local serving = tonumber(redis.call('HGET', room, 'serving') or 0)
if serving ~= tonumber(ARGV[1]) then return {-1, serving, 0} end
local now = tonumber(ARGV[2])
local heard_since = now - tonumber(ARGV[3])
local expires = now + tonumber(ARGV[4])
local quota = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now)
local admitted, skipped, next = 0, {}, serving
local i = 8
while admitted < quota and ARGV[i] do
  local place = ARGV[i]
  local heard = redis.call('ZSCORE', KEYS[5], ARGV[i + 1])
  if heard and tonumber(heard) >= heard_since then
    redis.call('ZADD', KEYS[6], expires, place)
    admitted = admitted + 1
  else
    skipped[#skipped + 1] = place
  end
  next = tonumber(place) + 1
  i = i + 2
end
redis.call('HSET', room, 'credit', tonumber(ARGV[6]) - admitted, 'credit_at', now)
if next > serving then
  redis.call('HSET', room, 'serving', next)
  redis.call('HINCRBY', room, 'admitted', admitted)
  redis.call('HINCRBY', room, 'skipped', #skipped)
  redis.call('RPUSH', KEYS[4], serving .. ':' .. next .. ':' .. now .. ':' .. table.concat(skipped, ','))
end
for k = 1, 6 do redis.call('PEXPIREAT', KEYS[k], ARGV[7]) end
return {admitted, next, #skipped}
