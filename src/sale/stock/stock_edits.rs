//! An operator's stock edit, on the Redis side (`lua/adjust_stock.lua`), and the marker
//! that keeps the reconciler's drift repair off the counter while the edit's two steps
//! (Postgres, Redis) run.
//!
//! The order of the steps keeps every moment safe to sell from: to **lower** the stock,
//! Redis gives up the units first (refused when fewer are left: the rest are sold or
//! held), then Postgres; to **raise** it, Postgres first, then Redis. In between, Redis
//! never offers a unit Postgres does not have.

use std::time::Duration;

use redis::Script;

use super::StockRedis;
use crate::metrics::RedisPurpose;
use crate::sale::item::ItemId;

/// How long a stock edit's marker lives at most: far above the edit's own time, short
/// enough that a crashed edit leaves the reconciler off the item only briefly.
pub const EDIT_MARKER_TTL: Duration = Duration::from_secs(10);

/// What Redis did with a stock change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adjusted {
    /// Applied: the counter now holds this many.
    Applied(i64),
    /// Refused: only this many units are left in Redis.
    TooFew(i64),
    /// The counter is missing (Redis lost it, or the item's keys expired).
    Missing,
}

/// An operator's stock change on the Redis side (see the module docs).
pub struct StockEdits {
    redis: StockRedis,
    adjust: Script,
}

impl StockEdits {
    /// Over `redis`'s keys.
    pub fn new(redis: StockRedis) -> Self {
        Self {
            redis,
            adjust: Script::new(include_str!("../../../lua/adjust_stock.lua")),
        }
    }

    /// Takes the item's edit marker; false when another edit holds it.
    pub async fn begin(&self, item: ItemId) -> anyhow::Result<bool> {
        let mut set = redis::cmd("SET");
        set.arg(self.redis.keys(item).stock_edit())
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(EDIT_MARKER_TTL.as_millis() as u64);
        let taken: Option<String> = self
            .redis
            .call(RedisPurpose::Other, "take the stock-edit marker", &set)
            .await?;
        Ok(taken.is_some())
    }

    /// Gives the marker back (it expires by itself if this never runs).
    pub async fn end(&self, item: ItemId) {
        let del = redis::cmd("DEL")
            .arg(self.redis.keys(item).stock_edit())
            .clone();
        if let Err(e) = self
            .redis
            .call::<i64>(RedisPurpose::Other, "drop the stock-edit marker", &del)
            .await
        {
            tracing::warn!(item.id = %item, error = %format!("{e:#}"), "stock-edit marker left to expire");
        }
    }

    /// Adds `change` (negative: lowers) to the counter.
    pub async fn adjust(&self, item: ItemId, change: i64) -> anyhow::Result<Adjusted> {
        Ok(self.adjust_reopening(item, change).await?.0)
    }

    /// Adds `change` to the counter; a raise reopens the item's waiting room if it was
    /// closed, and answers when it had closed (ms).
    pub async fn adjust_reopening(
        &self,
        item: ItemId,
        change: i64,
    ) -> anyhow::Result<(Adjusted, Option<i64>)> {
        let keys = self.redis.keys(item);
        let mut invocation = self.adjust.prepare_invoke();
        invocation
            .key(keys.stock())
            .key(keys.version())
            .key(keys.room())
            .arg(change);
        let (status, stock, reopened): (i64, i64, i64) = self
            .redis
            .call(RedisPurpose::Other, "adjust stock", &invocation)
            .await?;
        let adjusted = match status {
            1 => Adjusted::Applied(stock),
            0 => Adjusted::TooFew(stock),
            _ => Adjusted::Missing,
        };
        Ok((adjusted, (reopened > 0).then_some(reopened)))
    }

    /// When the item's waiting room closed (sold out for good, ms), if it is closed: what
    /// a raise of the stock is about to reopen, for the item's history.
    pub async fn closed_at(&self, item: ItemId) -> anyhow::Result<Option<i64>> {
        let mut get = redis::cmd("HGET");
        get.arg(self.redis.keys(item).room()).arg("closed_at");
        let closed: Option<i64> = self
            .redis
            .call(RedisPurpose::Other, "read a room's close", &get)
            .await?;
        Ok(closed.filter(|&at| at > 0))
    }
}
