-- Sets an item's room gate: whether its waiting room is on, as of the room's version in
-- Postgres (`waiting_rooms.version`, which every change bumps; 0 for an item whose room
-- was never set). The reservation script (`reserve_stock.lua`) reads it in its own
-- atomic step, so a change holds on every instance from the moment this script ran.
--
-- Writers: the operator's edit (before its 200), the rebuild of lost keys, and the
-- reconciler's round, each from what it read in Postgres. A writer that read an older
-- version than the gate holds writes nothing, so an instance that read "on" before the
-- operator turned the room off cannot turn it on again after the off's 200. "Off" is a
-- gate of its own (on = 0), never a missing key: a missing gate means Redis lost it,
-- and the reservation script then answers "rebuild", not "open".
--
-- KEYS[1]  the item's room gate (hash: version, on)
-- ARGV[1]  the room's version, as read in Postgres
-- ARGV[2]  '1' when the room is on, '0' when off
-- ARGV[3]  when the item's keys expire, ms since the epoch
--
-- Returns 1 when written, 0 when the gate held this version or a newer one (nothing
-- written).

local held = tonumber(redis.call('HGET', KEYS[1], 'version') or '-1')
if held >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'on', ARGV[2])
redis.call('PEXPIREAT', KEYS[1], ARGV[3])
return 1
