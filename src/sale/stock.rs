//! The sale's Redis side: an item's stock counter, its buyers, its pending
//! reservations and what the reconciler and the sweeper keep beside them.
//!
//! [`StockRedis`] is the handle every part shares (the store, the key scheme, one way to
//! call) with the plain reads; each job has a type of its own over it:
//! [`Reservations`] (the purchase path: reserve, record, undo, settle),
//! [`Returns`] (a released order's unit back), [`Repairs`] (what the reconciler reads
//! and writes), [`Rebuilds`] (lost keys back from Postgres), [`StockEdits`] (an
//! operator's stock change) and [`RoomGates`] (whether the item sells through its
//! waiting room, read by the reservation script). The key scheme and the
//! keys' lifetime are in [`item_keys`].
//!
//! An item's keys live as long as its units can still move: until its sale's end plus
//! the payment deadline plus [`KEY_GRACE`] ([`KeyLifetime`]). The rebuild and the
//! give-back set that expiry on the keys they create, the reconciler stamps it on every
//! key of the items it looks after (so a key a purchase created gets it within a
//! round), and Postgres stays the record of everything after.

use anyhow::Context;

use super::item::ItemId;
use crate::metrics::RedisPurpose;
use crate::store::redis_store::Request;
use crate::store::RedisStore;

pub mod item_keys;
mod rebuilds;
mod repairs;
mod reservations;
mod returns;
mod room_gates;
mod stock_edits;

pub use item_keys::{limiter_partition, ItemKeys, KeyLifetime, KEY_GRACE};
pub use rebuilds::Rebuilds;
pub use repairs::{Repairs, StockSnapshot};
pub use reservations::{PendingReservation, Reservation, ReservationOptions, Reservations, Undo};
pub use returns::{GivenBack, Returns};
pub use room_gates::{RoomGate, RoomGates};
pub use stock_edits::{Adjusted, StockEdits, EDIT_MARKER_TTL};

/// The sale's handle on Redis: the store, the key scheme, the one way to call.
#[derive(Clone)]
pub struct StockRedis {
    redis: RedisStore,
}

impl StockRedis {
    /// The sale's Redis side over `redis`'s connection and key prefix.
    pub fn new(redis: RedisStore) -> Self {
        Self { redis }
    }

    /// The store, for calls that are not the sale's own scripts.
    pub fn store(&self) -> &RedisStore {
        &self.redis
    }

    /// `item`'s keys under this deployment's prefix.
    pub fn keys(&self, item: ItemId) -> ItemKeys {
        ItemKeys::new(self.redis.prefix(), item)
    }

    /// One call through the store's wrapper, with what it was for in the error.
    pub(crate) async fn call<'r, T: redis::FromRedisValue>(
        &self,
        purpose: RedisPurpose,
        what: &'static str,
        request: impl Into<Request<'r>>,
    ) -> anyhow::Result<T> {
        self.redis
            .call(purpose, request)
            .await
            .with_context(|| format!("redis: {what}"))
    }

    /// Live stock of several items in one round trip; `None` where the counter is missing.
    pub async fn remaining(&self, items: &[ItemId]) -> anyhow::Result<Vec<Option<i64>>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = items.iter().map(|id| self.keys(*id).stock()).collect();
        self.call(
            RedisPurpose::Other,
            "read stock",
            &*redis::cmd("MGET").arg(&keys),
        )
        .await
    }

    /// The item's success counter (0 when missing).
    pub async fn success_count(&self, item: ItemId) -> anyhow::Result<i64> {
        let get = redis::cmd("GET").arg(self.keys(item).success()).to_owned();
        let count: Option<i64> = self
            .call(RedisPurpose::Other, "read success counter", &get)
            .await?;
        Ok(count.unwrap_or(0))
    }
}
