//! What the reconciler reads and writes in Redis: overdue reservations, in-doubt
//! commits, a consistent snapshot of an item's counters, the compare-and-set repair, and
//! the stamp of the keys' expiry. The purchase path uses none of it.

use redis::Script;
use uuid::Uuid;

use super::{KeyLifetime, PendingReservation, StockRedis};
use crate::metrics::RedisPurpose;
use crate::sale::item::{Item, ItemId};
use crate::sale::records::BatchKey;

/// An item's Redis state as the reconciler reads it: the counter, the reservations
/// behind it, who bought, the success counter, and the counter's version, which every
/// reservation, undo and repair bumps. The drift repair compares versions, not values: a
/// value can come back (one unit taken, another given back) while the reservations
/// behind it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockSnapshot {
    /// The stock counter (`None`: missing).
    pub stock: Option<i64>,
    /// The pending reservations.
    pub pending: Vec<PendingReservation>,
    /// How many buyers the set holds (`SCARD`: reading the members would block Redis
    /// for as long as the set is big, every round).
    pub buyers: i64,
    /// The success counter.
    pub success: i64,
    /// The counter's version.
    pub version: i64,
    /// Orders whose unit Redis has back while Postgres may not have marked them
    /// returned yet: they hold no unit here, whatever Postgres says.
    pub returning: Vec<Uuid>,
}

/// The reconciler's reads and writes of an item's Redis state.
pub struct Repairs {
    redis: StockRedis,
    repair: Script,
    lifetime: KeyLifetime,
}

impl Repairs {
    /// Over `redis`'s keys, setting them to expire as `lifetime` says.
    pub fn new(redis: StockRedis, lifetime: KeyLifetime) -> Self {
        Self {
            redis,
            repair: Script::new(include_str!("../../../lua/repair_item.lua")),
            lifetime,
        }
    }

    /// Reservations of `item` pending past their deadline (on the Redis clock).
    pub async fn overdue(&self, item: ItemId) -> anyhow::Result<Vec<PendingReservation>> {
        let (secs, micros): (u64, u64) = self
            .redis
            .call(RedisPurpose::Other, "time", &redis::cmd("TIME"))
            .await?;
        let now_ms = secs * 1000 + micros / 1000;
        let members: Vec<String> = self
            .redis
            .call(
                RedisPurpose::Other,
                "overdue reservations",
                &*redis::cmd("ZRANGEBYSCORE")
                    .arg(self.redis.keys(item).pending())
                    .arg("-inf")
                    .arg(now_ms),
            )
            .await?;
        Ok(members
            .iter()
            .filter_map(|m| PendingReservation::parse(m))
            .collect())
    }

    /// The batch keys recorded for `reservations` (see
    /// [`super::Reservations::note_in_doubt`]).
    pub async fn in_doubt(
        &self,
        item: ItemId,
        reservations: &[PendingReservation],
    ) -> anyhow::Result<Vec<Option<BatchKey>>> {
        if reservations.is_empty() {
            return Ok(Vec::new());
        }
        let orders: Vec<String> = reservations.iter().map(|r| r.order.to_string()).collect();
        let batches: Vec<Option<String>> = self
            .redis
            .call(
                RedisPurpose::Other,
                "read in-doubt commits",
                &*redis::cmd("HMGET")
                    .arg(self.redis.keys(item).in_doubt())
                    .arg(&orders),
            )
            .await?;
        // A value that is no batch key (a transaction id recorded before issue 38) names
        // nothing to settle: Postgres's timeouts have long ended that transaction.
        Ok(batches
            .into_iter()
            .map(|b| b.and_then(|b| b.parse().ok()).map(BatchKey))
            .collect())
    }

    /// Drops the in-doubt record of a reservation that has been resolved.
    pub async fn forget_in_doubt(
        &self,
        item: ItemId,
        reservation: PendingReservation,
    ) -> anyhow::Result<()> {
        let hdel = redis::cmd("HDEL")
            .arg(self.redis.keys(item).in_doubt())
            .arg(reservation.order.to_string())
            .to_owned();
        self.redis
            .call::<i64>(RedisPurpose::Other, "forget an in-doubt commit", &hdel)
            .await
            .map(drop)
    }

    /// Stock counter, pending reservations, the number of buyers, success counter, the
    /// stock's version and the orders being given back, read atomically.
    pub async fn stock_snapshot(&self, item: ItemId) -> anyhow::Result<StockSnapshot> {
        let keys = self.redis.keys(item);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .get(keys.stock())
            .zrange(keys.pending(), 0, -1)
            .scard(keys.buyers())
            .get(keys.success())
            .get(keys.version())
            .smembers(keys.returning());
        type Replies = (
            Option<i64>,
            Vec<String>,
            i64,
            Option<i64>,
            Option<i64>,
            Vec<String>,
        );
        let (stock, members, buyers, success, version, returning): Replies = self
            .redis
            .call(RedisPurpose::Other, "stock snapshot", &pipe)
            .await?;
        Ok(StockSnapshot {
            stock,
            pending: members
                .iter()
                .filter_map(|m| PendingReservation::parse(m))
                .collect(),
            buyers,
            success: success.unwrap_or(0),
            version: version.unwrap_or(0),
            returning: returning.iter().filter_map(|o| o.parse().ok()).collect(),
        })
    }

    /// Writes the reconciler's repair (see `lua/repair_item.lua`) only if nothing moved
    /// the stock since `snapshot`: the stock, and when `sold` is given (no reservation
    /// was pending) the buyers and the success counter too.
    pub async fn repair_if_unmoved(
        &self,
        item: ItemId,
        snapshot: &StockSnapshot,
        stock: i64,
        sold: Option<(&[i64], i64)>,
    ) -> anyhow::Result<bool> {
        let keys = self.redis.keys(item);
        let mut invocation = self.repair.prepare_invoke();
        invocation
            .key(keys.stock())
            .key(keys.version())
            .key(keys.buyers())
            .key(keys.success())
            .key(keys.stock_edit())
            .arg(snapshot.version)
            .arg(stock);
        match sold {
            Some((buyers, orders)) => invocation.arg(orders).arg(buyers),
            None => invocation.arg(""),
        };
        let written: i64 = self
            .redis
            .call(RedisPurpose::Other, "repair item", &invocation)
            .await?;
        Ok(written == 1)
    }

    /// Sets the expiry of every key of `item` (see [`KeyLifetime`]); keys
    /// created since the last stamp (an orders hash, a buyers set) get theirs here.
    pub async fn stamp_expiry(&self, item: &Item) -> anyhow::Result<()> {
        let at = self.lifetime.expire_at_ms(item);
        let mut pipe = redis::pipe();
        pipe.atomic();
        for key in self.redis.keys(item.id).item_wide() {
            pipe.pexpire_at(key, at).ignore();
        }
        self.redis
            .call(RedisPurpose::Other, "stamp key expiry", &pipe)
            .await
    }
}
