-- Joins a user to an item's waiting room, once: a second join answers the first's index.
--
-- KEYS[1..6]  the room's keys (`ItemKeys::room_wide`): state hash, members, rounds,
--             steps, alive, live
-- ARGV[1]     user id
-- ARGV[2]     now, ms
-- ARGV[3]     sale start, ms: the first join at or after it closes the pre-queue
--             (its size, `pre`, is the joiners before this one)
-- ARGV[4]     the room's order (`RoomOrder`): 'fifo' (in the order of joining) or
--             'random'
-- ARGV[5]     when the room's keys expire, ms
--
-- Returns {index, new (1/0), placed (1 when the index is its own place already: a
-- fifo joiner after the pre-queue, placed)}; {-1, 0, 0}, with nothing written, when the
-- room is closed for good (`closed_at`, `lua/room_close.lua`): checked here, where every
-- instance's join looks, so a close or a reopen holds on all of them at once; an error
-- reply `ERR unknown room order <word>`, with nothing written, when ARGV[4] is neither
-- word.

local room = KEYS[1]
local now = tonumber(ARGV[2])
local order = ARGV[4]
if order ~= 'fifo' and order ~= 'random' then
  return redis.error_reply('ERR unknown room order ' .. tostring(order))
end
local fifo = order == 'fifo'
if redis.call('HEXISTS', room, 'closed_at') == 1 then return {-1, 0, 0} end
local known = redis.call('HGET', KEYS[2], ARGV[1])
if known then
  redis.call('ZADD', KEYS[5], now, known)
  local index = tonumber(known)
  -- In fifo order every joiner after the pre-queue is placed at its own index.
  local placed = 0
  if fifo and redis.call('HGET', room, 'sealed0') == '1'
      and index >= tonumber(redis.call('HGET', room, 'pre') or 0)
      and index < tonumber(redis.call('HGET', room, 'mapped') or 0) then
    placed = 1
  end
  return {index, 0, placed}
end
if now >= tonumber(ARGV[3]) and redis.call('HEXISTS', room, 'pre') == 0 then
  local pre = tonumber(redis.call('HGET', room, 'joined') or 0)
  redis.call('HSET', room, 'pre', pre)
  if pre == 0 then
    -- Nobody to draw: the pre-queue's round is empty, sealed here with no seed (the
    -- inlet's `lua/room_seal.lua` would find nothing to shuffle).
    redis.call('HSET', room, 'sealed0', 1, 'mapped', 0, 'sealed_at', now)
    redis.call('RPUSH', KEYS[3], '0:0:0')
  end
end
local index = redis.call('HINCRBY', room, 'joined', 1) - 1
redis.call('HSET', KEYS[2], ARGV[1], index)
redis.call('ZADD', KEYS[5], now, index)
local placed = 0
if fifo and redis.call('HGET', room, 'sealed0') == '1'
    and tonumber(redis.call('HGET', room, 'mapped') or 0) == index then
  redis.call('HSET', room, 'mapped', index + 1)
  placed = 1
end
for i = 1, 6 do redis.call('PEXPIREAT', KEYS[i], ARGV[5]) end
return {index, 1, placed}
