//! Lost keys back from Postgres (`lua/rebuild_item.lua`): an item's stock counter and
//! buyers, when Redis lost its data, the keys expired or the prefix changed; and its
//! room gate (`lua/room_gate.lua`), so a lost gate comes back as Postgres has it, never
//! as "no room".

use std::sync::LazyLock;

use redis::Script;

use super::{KeyLifetime, RoomGates, StockRedis};
use crate::metrics::RedisPurpose;
use crate::sale::item::Item;
use crate::sale::records::ItemLedger;

static REBUILD: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/rebuild_item.lua")));

/// Writes rebuilt keys (the caller reads the ledger from Postgres).
pub struct Rebuilds {
    redis: StockRedis,
    lifetime: KeyLifetime,
}

impl Rebuilds {
    /// Over `redis`'s keys, expiring as `lifetime` says.
    pub fn new(redis: StockRedis, lifetime: KeyLifetime) -> Self {
        Self { redis, lifetime }
    }

    /// Sets `item`'s room gate from Postgres's `ledger`, unless it holds the ledger's
    /// version of the room or a newer one; then rebuilds the stock counter and buyers
    /// when the counter is missing (see `lua/rebuild_item.lua`); a live counter is never
    /// overwritten. The gate goes first, so a counter never stands without it: a new
    /// item whose room is on never sells bare between the two writes (a missing gate
    /// asks for a rebuild, never reads as open). Returns whether the counter was
    /// (re)created.
    pub async fn rebuild(&self, item: &Item, ledger: &ItemLedger) -> anyhow::Result<bool> {
        RoomGates::new(self.redis.clone(), self.lifetime)
            .set(item, ledger.room)
            .await?;
        let keys = self.redis.keys(item.id);
        let mut invocation = REBUILD.prepare_invoke();
        invocation
            .key(keys.stock())
            .key(keys.buyers())
            .key(keys.returned())
            .key(keys.version())
            .arg(ledger.remaining)
            .arg(self.lifetime.expire_at_ms(item))
            .arg(ledger.owed.len());
        for owed in &ledger.owed {
            invocation.arg(owed.order.to_string()).arg(owed.user.get());
        }
        invocation.arg(&ledger.buyers);
        let created: i64 = self
            .redis
            .call(RedisPurpose::Other, "rebuild item", &invocation)
            .await?;
        Ok(created == 1)
    }
}
