//! The purchase path's Redis side: reserve a unit (`lua/reserve_stock.lua`, alone or in
//! the limiter's own call), record the success (one MULTI/EXEC pipeline), undo a
//! reservation whose order was not committed (`lua/undo_reservation.lua`), settle the
//! committed ones, and note a commit whose answer was lost.

use std::time::Duration;

use anyhow::Context;
use redis::Script;
use uuid::Uuid;

use super::StockRedis;
use crate::domain::UserId;
use crate::limiter::{FollowUp, Then};
use crate::metrics::RedisPurpose;
use crate::sale::item::{Item, ItemId};
use crate::sale::records::BatchKey;

/// How long the per-user success marker lives.
const MARKER_TTL_SECS: u64 = 300;

/// How long an in-doubt record is kept at most: the reconciler removes it once it has
/// resolved the reservation, well before this.
const IN_DOUBT_TTL_MS: u64 = 24 * 60 * 60 * 1000;

const RESERVE_STOCK: &str = include_str!("../../../lua/reserve_stock.lua");

/// A reservation waiting for its order commit, as recorded in the pending set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PendingReservation {
    /// The buyer.
    pub user: UserId,
    /// The order the reservation is for (made before the call, so Postgres can be asked
    /// about it).
    pub order: Uuid,
}

impl PendingReservation {
    pub(super) fn member(&self) -> String {
        format!("{}:{}", self.user, self.order)
    }

    pub(super) fn parse(member: &str) -> Option<Self> {
        let (user, order) = member.split_once(':')?;
        Some(Self {
            user: user.parse().ok()?,
            order: order.parse().ok()?,
        })
    }
}

/// The answer of `lua/reserve_stock.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// A unit is the user's, pending its order's commit.
    Reserved {
        /// Units left after this one.
        remaining: i64,
    },
    /// Before the sale's start, on the Redis clock.
    NotStarted,
    /// From the sale's end on, on the Redis clock.
    Ended,
    /// The user is among the item's buyers already.
    AlreadyPurchased,
    /// The counter is at 0.
    SoldOut,
    /// The stock counter or the room gate is gone (Redis lost its data): rebuild before
    /// selling.
    Missing,
    /// The item sells through its waiting room (its gate is on) and the purchase
    /// offered no valid pass.
    NotAdmitted,
}

/// How to undo a reservation whose commit did not happen (see `lua/undo_reservation.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    /// No order was made: the unit back, the buyer mark and the pipeline's writes gone.
    Whole,
    /// Postgres already holds an order of this user: the unit back, the mark kept.
    KeepBuyer {
        /// That order, when Postgres named it.
        existing_order: Option<Uuid>,
    },
    /// Postgres had no unit left: the counter set to 0, the mark gone.
    SoldOut,
}

/// How reservations behave (settings `reservation_deadline_ms`,
/// `reservation_replica_wait_ms`).
#[derive(Debug, Clone, Copy)]
pub struct ReservationOptions {
    /// How long a reservation may stay pending before the reconciler looks at it.
    pub pending: Duration,
    /// After each reservation, wait up to this long for one replica to acknowledge it
    /// (`WAIT 1 <ms>`), so a failover right after it is less likely to lose it. Best
    /// effort: a replica that does not answer in time delays the purchase by this and
    /// changes nothing else (the reservation stands on the master; Postgres and the
    /// reconciler still guard against what a failover loses). Zero: no wait.
    pub replica_wait: Duration,
}

/// The purchase path's Redis side (see the module docs); its scripts built once, one per
/// process.
pub struct Reservations {
    redis: StockRedis,
    reserve: Script,
    /// The same reservation, composed after a `per_item` limiter decision: one call.
    reserve_after_limit: FollowUp,
    undo: Script,
    /// How long a reservation may stay pending before the reconciler looks at it.
    pending_ms: u64,
    /// `WAIT 1 <ms>` after each reservation, or not.
    replica_wait_ms: Option<u64>,
}

impl Reservations {
    /// The scripts over `redis`'s item keys, with `options`' deadlines.
    pub fn new(redis: StockRedis, options: ReservationOptions) -> Self {
        let wait = options.replica_wait;
        Self {
            redis,
            reserve: Script::new(RESERVE_STOCK),
            reserve_after_limit: FollowUp::new(RESERVE_STOCK),
            undo: Script::new(include_str!("../../../lua/undo_reservation.lua")),
            pending_ms: options.pending.as_millis() as u64,
            replica_wait_ms: (!wait.is_zero()).then_some(wait.as_millis() as u64),
        }
    }

    /// Reserves a unit of `item` for `user`'s `order` (`lua/reserve_stock.lua`), spending
    /// the queue pass at `pass` if one was offered.
    pub async fn reserve(
        &self,
        item: &Item,
        user: UserId,
        order: Uuid,
        pass: Option<u64>,
    ) -> anyhow::Result<Reservation> {
        let (keys, args) = self.reservation_call(item, user, order, pass);
        let mut invocation = self.reserve.prepare_invoke();
        for key in &keys {
            invocation.key(key);
        }
        for arg in &args {
            invocation.arg(arg);
        }
        let reply: (i64, i64) = self
            .redis
            .call(RedisPurpose::Reservation, "reserve stock", &invocation)
            .await?;
        self.reserved(item, reply).await
    }

    /// The reservation to run in a `per_item` limiter's call (`Limiter::check_then`).
    pub fn reserve_after_limit(
        &self,
        item: &Item,
        user: UserId,
        order: Uuid,
        pass: Option<u64>,
    ) -> Then<'_> {
        let (keys, args) = self.reservation_call(item, user, order, pass);
        Then {
            script: &self.reserve_after_limit,
            keys,
            args,
        }
    }

    /// Reads the reply of a reservation made in the limiter's call.
    pub async fn reserved_after_limit(
        &self,
        item: &Item,
        reply: &redis::Value,
    ) -> anyhow::Result<Reservation> {
        let reply: (i64, i64) =
            redis::from_redis_value_ref(reply).context("reserve_stock.lua's reply")?;
        self.reserved(item, reply).await
    }

    /// `lua/reserve_stock.lua`'s keys and arguments; `pass` is the place of the valid
    /// queue pass the purchase offered, if any: the script decides with the item's room
    /// gate whether one was needed.
    fn reservation_call(
        &self,
        item: &Item,
        user: UserId,
        order: Uuid,
        pass: Option<u64>,
    ) -> (Vec<String>, Vec<String>) {
        let keys = self.redis.keys(item.id);
        (
            vec![
                keys.stock(),
                keys.buyers(),
                keys.pending(),
                keys.version(),
                keys.room_live(),
                keys.room_gate(),
            ],
            vec![
                user.get().to_string(),
                item.starts_at.timestamp_millis().to_string(),
                item.ends_at.timestamp_millis().to_string(),
                order.to_string(),
                self.pending_ms.to_string(),
                pass.map(|place| place.to_string()).unwrap_or_default(),
            ],
        )
    }

    /// What the reservation script answered; after a reservation, the wait for a
    /// replica when one is asked for.
    async fn reserved(
        &self,
        item: &Item,
        (status, remaining): (i64, i64),
    ) -> anyhow::Result<Reservation> {
        if status == 1 {
            if let Some(wait_ms) = self.replica_wait_ms {
                // On a cluster the client sends WAIT to every master (over the same
                // connections as the writes), so the slowest replica decides.
                // Best effort: the reservation is made whatever the answer, and failing
                // the purchase now would only hold its unit until the reconciler.
                let acked: anyhow::Result<i64> = self
                    .redis
                    .call(
                        RedisPurpose::Reservation,
                        "wait for a replica",
                        &*redis::cmd("WAIT").arg(1).arg(wait_ms),
                    )
                    .await;
                if !matches!(acked, Ok(1..)) {
                    tracing::debug!(item.id = %item.id, wait_ms, ?acked, "no replica acknowledged a reservation in time");
                }
            }
        }
        Ok(match status {
            1 => Reservation::Reserved { remaining },
            -1 => Reservation::NotStarted,
            -2 => Reservation::Ended,
            -3 => Reservation::AlreadyPurchased,
            -4 => Reservation::SoldOut,
            -5 => Reservation::Missing,
            -6 => Reservation::NotAdmitted,
            other => anyhow::bail!("reserve_stock.lua answered {other}"),
        })
    }

    /// The success pipeline, atomic (MULTI/EXEC): counter, per-user marker, order hash.
    pub async fn record_success(
        &self,
        item: ItemId,
        user: UserId,
        order: Uuid,
    ) -> anyhow::Result<()> {
        let keys = self.redis.keys(item);
        let order = order.to_string();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .incr(keys.success(), 1)
            .ignore()
            .set_ex(keys.marker(user), &order, MARKER_TTL_SECS)
            .ignore()
            .hset(keys.orders(), user.get(), &order)
            .ignore();
        self.redis
            .call(RedisPurpose::Pipeline, "success pipeline", &pipe)
            .await
    }

    /// Undoes a reservation that will have no order (see `lua/undo_reservation.lua`).
    /// Returns false when it was no longer pending: someone else settled it first.
    pub async fn undo(
        &self,
        item: ItemId,
        reservation: PendingReservation,
        how: Undo,
    ) -> anyhow::Result<bool> {
        let keys = self.redis.keys(item);
        let (mode, existing) = match how {
            Undo::Whole => ("whole", None),
            Undo::KeepBuyer { existing_order } => ("keep_buyer", existing_order),
            Undo::SoldOut => ("sold_out", None),
        };
        let mut invocation = self.undo.prepare_invoke();
        invocation
            .key(keys.stock())
            .key(keys.buyers())
            .key(keys.success())
            .key(keys.marker(reservation.user))
            .key(keys.orders())
            .key(keys.pending())
            .key(keys.version())
            .arg(reservation.user.get())
            .arg(reservation.order.to_string())
            .arg(mode)
            .arg(existing.map(|o| o.to_string()).unwrap_or_default());
        let undone: i64 = self
            .redis
            .call(RedisPurpose::Other, "undo reservation", &invocation)
            .await?;
        Ok(undone == 1)
    }

    /// The orders are committed: their reservations are no longer pending (one `ZREM`).
    pub async fn settle(
        &self,
        item: ItemId,
        reservations: &[PendingReservation],
    ) -> anyhow::Result<()> {
        let members: Vec<String> = reservations
            .iter()
            .map(PendingReservation::member)
            .collect();
        let zrem = redis::cmd("ZREM")
            .arg(self.redis.keys(item).pending())
            .arg(members)
            .to_owned();
        self.redis
            .call::<i64>(RedisPurpose::Reservation, "settle reservation", &zrem)
            .await
            .map(drop)
    }

    /// Records that `reservation`'s commit went unanswered in batch `batch`, unsettled.
    pub async fn note_in_doubt(
        &self,
        item: ItemId,
        reservation: PendingReservation,
        batch: BatchKey,
    ) -> anyhow::Result<()> {
        let key = self.redis.keys(item).in_doubt();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hset(&key, reservation.order.to_string(), batch.0.to_string())
            .ignore()
            .pexpire(&key, IN_DOUBT_TTL_MS as i64)
            .ignore();
        self.redis
            .call(RedisPurpose::Other, "note an in-doubt commit", &pipe)
            .await
    }
}
