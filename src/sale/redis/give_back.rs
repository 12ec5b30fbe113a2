//! A released order's unit back into Redis (`lua/give_back.lua`), at most once per
//! order however often it is asked: the sweeper retries every order Postgres has not
//! marked returned, and a crash may come between the give-back and that mark.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::SaleRedis;
use crate::metrics::RedisPurpose;
use crate::sale::postgres::GiveBack;

static GIVE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/give_back.lua")));

/// How long an item's returned set remembers an order: far longer than the sweeper
/// takes to mark it returned in Postgres, after which nobody asks again.
const RETURNED_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// What a give-back found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GivenBack {
    /// The unit is back (stock, buyer mark, success counter, orders hash).
    Now,
    /// An earlier attempt gave it back already.
    Before,
    /// The item's stock counter is missing: rebuild it from Postgres first.
    NoCounter,
}

impl SaleRedis {
    /// Gives `order`'s unit back. With `rebuy`, the shopper's buyer mark goes too.
    pub async fn give_back(&self, order: &GiveBack, rebuy: bool) -> anyhow::Result<GivenBack> {
        let keys = self.keys(order.item);
        let mut invocation = GIVE_BACK.prepare_invoke();
        invocation
            .key(keys.stock())
            .key(keys.buyers())
            .key(keys.success())
            .key(keys.marker(order.user))
            .key(keys.orders())
            .key(keys.version())
            .key(keys.returned())
            .arg(order.user.get())
            .arg(order.order.to_string())
            .arg(if rebuy { "rebuy" } else { "keep_buyer" })
            .arg(RETURNED_TTL.as_millis() as u64);
        let answer: i64 = self
            .call(RedisPurpose::Other, "give a unit back", &invocation)
            .await?;
        Ok(match answer {
            1 => GivenBack::Now,
            0 => GivenBack::Before,
            _ => GivenBack::NoCounter,
        })
    }
}
