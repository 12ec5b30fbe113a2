//! The room gate (`lua/room_gate.lua`): whether an item sells through its waiting room,
//! in Redis beside the item's stock, where the reservation script reads it in its own
//! step. Postgres's `waiting_rooms` holds the settings; the gate is what is in force.

use std::sync::LazyLock;

use redis::Script;

use super::{KeyLifetime, StockRedis};
use crate::metrics::RedisPurpose;
use crate::sale::item::Item;

static ROOM_GATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/room_gate.lua")));

/// An item's room as the gate holds it: on or off, as of a version of its settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoomGate {
    /// `waiting_rooms.version` (0: the room was never set). Only a newer version
    /// changes the gate, so a writer that read Postgres before a change cannot undo it.
    pub version: i64,
    /// Whether purchases need a pass.
    pub on: bool,
}

/// The room gates' Redis side (see the module docs).
pub struct RoomGates {
    redis: StockRedis,
    lifetime: KeyLifetime,
}

impl RoomGates {
    /// Over `redis`'s keys, expiring with the item's as `lifetime` says.
    pub fn new(redis: StockRedis, lifetime: KeyLifetime) -> Self {
        Self { redis, lifetime }
    }

    /// Sets `item`'s gate to `gate` unless it holds that version or a newer one.
    /// Returns whether it was written.
    pub async fn set(&self, item: &Item, gate: RoomGate) -> anyhow::Result<bool> {
        let mut invocation = ROOM_GATE.prepare_invoke();
        invocation
            .key(self.redis.keys(item.id).room_gate())
            .arg(gate.version)
            .arg(if gate.on { "1" } else { "0" })
            .arg(self.lifetime.expire_at_ms(item));
        let written: i64 = self
            .redis
            .call(RedisPurpose::Other, "set room gate", &invocation)
            .await?;
        Ok(written == 1)
    }
}
