-- Places the joiners not placed yet. At or after the sale's start, the pre-queue first:
-- round 0, shuffled with ARGV[3]'s seed, once. After it, the later joiners: in fifo
-- order each at its own index (no round recorded: seed 0 is the identity); in random
-- order one round per ARGV[6] ms, shuffled with the seed.
--
-- KEYS[1..6]  the room's keys (`ItemKeys::room_wide`)
-- ARGV[1]     now, ms
-- ARGV[2]     sale start, ms
-- ARGV[3]     this round's seed (a non-zero u64, decimal)
-- ARGV[4]     the room's order (`RoomOrder`): 'fifo' or 'random'
-- ARGV[5]     when the room's keys expire, ms
-- ARGV[6]     the random order's round length, ms
--
-- Returns {round (-1: none recorded), first index, size}; an error reply
-- `ERR unknown room order <word>`, with nothing written, when ARGV[4] is neither word.

local order = ARGV[4]
if order ~= 'fifo' and order ~= 'random' then
  return redis.error_reply('ERR unknown room order ' .. tostring(order))
end
local fifo = order == 'fifo'
local room = KEYS[1]
local now = tonumber(ARGV[1])
if now < tonumber(ARGV[2]) then return {-1, 0, 0} end
local joined = tonumber(redis.call('HGET', room, 'joined') or 0)
local function stamp()
  for i = 1, 6 do redis.call('PEXPIREAT', KEYS[i], ARGV[5]) end
end
if redis.call('HGET', room, 'sealed0') ~= '1' then
  local pre = tonumber(redis.call('HGET', room, 'pre') or joined)
  local mapped = pre
  if fifo then mapped = joined end
  redis.call('HSET', room, 'pre', pre, 'sealed0', 1, 'mapped', mapped, 'sealed_at', now)
  redis.call('RPUSH', KEYS[3], '0:' .. pre .. ':' .. ARGV[3])
  stamp()
  return {0, 0, pre}
end
local mapped = tonumber(redis.call('HGET', room, 'mapped') or 0)
if joined <= mapped then return {-1, mapped, 0} end
if fifo then
  redis.call('HSET', room, 'mapped', joined)
  return {-1, mapped, joined - mapped}
end
if now - tonumber(redis.call('HGET', room, 'sealed_at') or 0) < tonumber(ARGV[6]) then
  return {-1, mapped, 0}
end
local rounds = redis.call('RPUSH', KEYS[3], mapped .. ':' .. (joined - mapped) .. ':' .. ARGV[3])
redis.call('HSET', room, 'mapped', joined, 'sealed_at', now)
stamp()
return {rounds - 1, mapped, joined - mapped}
