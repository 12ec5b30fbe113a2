//! A released order's unit back into Redis (`lua/give_back.lua`), at most once per
//! order however often it is asked: the sweeper retries every order Postgres has not
//! marked returned, and a crash may come between the give-back and that mark.

use std::sync::LazyLock;

use redis::Script;
use uuid::Uuid;

use super::{KeyLifetime, StockRedis};
use crate::metrics::RedisPurpose;
use crate::sale::item::{Item, ItemId};
use crate::sale::records::GiveBack;

static GIVE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/give_back.lua")));

/// What a give-back found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GivenBack {
    /// The unit is back (stock, buyer mark, success counter, orders hash).
    Now,
    /// An earlier attempt gave it back already.
    Before,
    /// The item's keys are gone (lost, expired, or past their lifetime): nothing was
    /// written. An item still on sale is rebuilt from Postgres first; an ended one's
    /// unit is recorded in Postgres alone.
    KeysGone,
}

/// Gives released units back (and remembers which, see the script's returning set).
pub struct Returns {
    redis: StockRedis,
    lifetime: KeyLifetime,
}

impl Returns {
    /// Over `redis`'s keys, expiring as `lifetime` says.
    pub fn new(redis: StockRedis, lifetime: KeyLifetime) -> Self {
        Self { redis, lifetime }
    }

    /// Gives `order`'s unit of `item` back. With `rebuy`, the shopper's buyer mark goes
    /// too.
    pub async fn give_back(
        &self,
        order: &GiveBack,
        item: &Item,
        rebuy: bool,
    ) -> anyhow::Result<GivenBack> {
        let keys = self.redis.keys(order.item);
        let mut invocation = GIVE_BACK.prepare_invoke();
        invocation
            .key(keys.stock())
            .key(keys.buyers())
            .key(keys.success())
            .key(keys.marker(order.user))
            .key(keys.orders())
            .key(keys.version())
            .key(keys.returned())
            .key(keys.returning())
            .arg(order.user.get())
            .arg(order.order.to_string())
            .arg(if rebuy { "rebuy" } else { "keep_buyer" })
            .arg(self.lifetime.expire_at_ms(item));
        let answer: i64 = self
            .redis
            .call(RedisPurpose::Other, "give a unit back", &invocation)
            .await?;
        Ok(match answer {
            1 => GivenBack::Now,
            0 => GivenBack::Before,
            _ => GivenBack::KeysGone,
        })
    }

    /// Postgres has marked `orders` returned: the reconciler may count them by Postgres
    /// again (see `lua/give_back.lua`'s returning set).
    pub async fn forget_returning(&self, item: ItemId, orders: &[Uuid]) -> anyhow::Result<()> {
        if orders.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = orders.iter().map(Uuid::to_string).collect();
        let srem = redis::cmd("SREM")
            .arg(self.redis.keys(item).returning())
            .arg(ids)
            .to_owned();
        self.redis
            .call::<i64>(RedisPurpose::Other, "forget returning orders", &srem)
            .await
            .map(drop)
    }
}
