//! Makes Redis agree with Postgres after crashes and losses.
//!
//! Every `reconcile_interval` one instance (whoever takes the Redis lock
//! `<prefix>:reconciler:lock`, which expires with the interval) goes through the items
//! whose Redis keys still live (until the sale's end, the payment deadline and an hour
//! more: `SaleRedis::keys_expire_at`):
//! - the room gate is set from Postgres's `waiting_rooms` where Redis holds an older
//!   version (an operator's change whose Redis write failed or a failover lost);
//! - the keys' expiry is stamped (a key a purchase created since the last round gets it);
//! - each reservation pending past its deadline is looked up in Postgres: its order
//!   exists → the record is cleared (`settled`); it does not → the reservation is undone,
//!   stock back, buyer mark and pipeline writes removed (`released`). A reservation whose
//!   commit went unanswered has its batch settled first (`records::settle`: once it
//!   returns, the batch has ended or will never write), so the lookup is final;
//! - Redis stock + pending reservations not yet committed + Postgres orders holding a
//!   unit must equal the total stock, and with nothing pending the buyers set's size and
//!   the success counter must equal Postgres's orders (when they do not, the set is
//!   rewritten from Postgres). Orders Redis has given back while Postgres may not have
//!   marked them yet (the returning set, read with the counter) hold no unit, so a round
//!   between a give-back and its mark sees the stores agree. A difference is logged,
//!   counted (`drift`) and repaired with a compare-and-set, so a purchase racing the
//!   check wins and the repair waits for the next round;
//! - a missing stock counter of an item still on sale (Redis restarted without data) is
//!   rebuilt from Postgres (`rebuilt`); an ended item's is left gone;
//! - the batch keys older than an hour are deleted (`order_batches`);
//! - a released unit that has waited for its give-back longer than `STALE_RETURN` is
//!   given back here (`returned`), through the sweeper's own give-back.
//!
//! It is a type of its own, holding the parts of the sale it reads and repairs, so that
//! it can be read (and run) apart from the purchase flow.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use super::item::{Item, SalePhase};
use super::parts::SaleParts;
use super::records;
use super::stock::{Repairs, ReservationOptions, Reservations, RoomGate, RoomGates, Undo};
use super::sweeper::Sweeper;
use crate::vocabulary::Repair;

/// How long a released unit may wait for the sweeper before the reconciler gives it
/// back itself: far longer than a sweep takes, so the two rarely meet (and when they
/// do, the give-back acts once).
const STALE_RETURN: chrono::Duration = chrono::Duration::minutes(1);

/// Released units the reconciler gives back per item and round at most.
const STALE_BATCH: i64 = 500;

/// The reconciler (see the module docs): run on whichever instance holds its lock.
pub struct Reconciler {
    parts: SaleParts,
    repairs: Repairs,
    /// Undoes and settles overdue reservations, as the purchase path would have.
    reservations: Reservations,
    /// The one way units go back to Redis.
    sweeper: Sweeper,
    gates: RoomGates,
}

impl Reconciler {
    /// `reservations` must be the purchase path's own options: the reconciler undoes
    /// what the purchase path reserved.
    pub fn new(parts: &SaleParts, reservations: ReservationOptions) -> Self {
        Self {
            repairs: Repairs::new(parts.redis.clone(), parts.lifetime),
            reservations: Reservations::new(parts.redis.clone(), reservations),
            sweeper: Sweeper::new(parts),
            gates: RoomGates::new(parts.redis.clone(), parts.lifetime),
            parts: parts.clone(),
        }
    }

    /// Runs at start-up and then every `interval`, forever, on one instance at a time
    /// (`leader::run_led`); `instance` names this process in the lock.
    pub async fn run(self, interval: Duration, instance: String) {
        let reconciler = Arc::new(self);
        let redis = reconciler.parts.redis.store().clone();
        super::leader::run_led("reconciler", interval, redis, instance, || {
            let reconciler = Arc::clone(&reconciler);
            async move {
                reconciler.reconcile().await?;
                reconciler.parts.metrics.reconciler_rounds.inc();
                Ok(())
            }
        })
        .await
    }

    /// One round over every item whose keys still live.
    pub async fn reconcile(&self) -> anyhow::Result<()> {
        let parts = &self.parts;
        parts.catalog.reload(&parts.pool).await?;
        let now = Utc::now();
        // The items before the gates: an item is committed with its room (one
        // transaction), so every item listed here has its room in the gates read after.
        // Read the other way round, an item created between the two reads would get the
        // gate of no room (off, version 0) until the next round.
        let items = parts.catalog.all();
        let gates = records::room_gates(&parts.pool).await?;
        records::forget_old_batches(&parts.pool).await?;
        for item in items {
            if parts.lifetime.expire_at(&item) <= now {
                continue;
            }
            self.put_gate(&item, gates.get(&item.id).copied().unwrap_or_default())
                .await?;
            self.settle_overdue(&item).await?;
            self.repairs.stamp_expiry(&item).await?;
            self.return_stale(&item).await?;
            self.check_drift(&item).await?;
        }
        Ok(())
    }

    /// Sets `item`'s room gate to what Postgres read this round, unless the gate holds
    /// that version or a newer one: an operator's change whose Redis write failed, or
    /// that a failover lost, is in force from this round on. A round that read before a
    /// change cannot undo it (the version says it is older).
    async fn put_gate(&self, item: &Item, gate: RoomGate) -> anyhow::Result<()> {
        if self.gates.set(item, gate).await? {
            tracing::info!(item.id = %item.id, room.version = gate.version, room.on = gate.on, "room gate set from postgres");
        }
        Ok(())
    }

    /// Gives back the units of `item` released more than [`STALE_RETURN`] ago that
    /// Redis still has not had back (the sweeper is the one that should have).
    async fn return_stale(&self, item: &Item) -> anyhow::Result<()> {
        let stale = records::unreturned(
            &self.parts.pool,
            item.id,
            STALE_BATCH,
            Some(Utc::now() - STALE_RETURN),
        )
        .await?;
        if stale.is_empty() {
            return Ok(());
        }
        self.sweeper.give_back(&stale).await?;
        self.parts
            .metrics
            .reconciler_repairs
            .with_label_values(&[Repair::Returned.label()])
            .inc_by(stale.len() as u64);
        tracing::warn!(item.id = %item.id, orders = stale.len(), "released units the sweeper had not given back: returned");
        Ok(())
    }

    async fn settle_overdue(&self, item: &Item) -> anyhow::Result<()> {
        let overdue = self.repairs.overdue(item.id).await?;
        let in_doubt = self.repairs.in_doubt(item.id, &overdue).await?;
        for (reservation, batch) in overdue.into_iter().zip(in_doubt) {
            // A commit that went unanswered: settled before the lookup, which is then
            // final. It waits for a statement still running (a round that cannot finish
            // it fails, and the next one tries again). Without a record the statement
            // is over: Postgres's `statement_timeout` ends it before the deadline.
            if let Some(batch) = batch {
                records::settle(&self.parts.pool, batch).await?;
            }
            if records::order_by_id(&self.parts.pool, reservation.order)
                .await?
                .is_some()
            {
                self.reservations.settle(item.id, &[reservation]).await?;
                self.count_repair(Repair::Settled);
                tracing::info!(item.id = %item.id, user.id = %reservation.user, "pending reservation had its order: settled");
            } else if self
                .reservations
                .undo(item.id, reservation, Undo::Whole)
                .await?
            {
                self.count_repair(Repair::Released);
                tracing::warn!(item.id = %item.id, user.id = %reservation.user, "abandoned reservation released");
                self.parts.sold_out.announce(item.id, false).await;
            }
            if batch.is_some() {
                self.repairs.forget_in_doubt(item.id, reservation).await?;
            }
        }
        Ok(())
    }

    /// Makes Redis agree with Postgres on the item's stock and, when no reservation is
    /// pending, on its buyers and success counter too (with reservations in flight those
    /// two depend on how far each purchase got; the next quiet round repairs them).
    async fn check_drift(&self, item: &Item) -> anyhow::Result<()> {
        let snapshot = self.repairs.stock_snapshot(item.id).await?;
        let Some(stock) = snapshot.stock else {
            if item.phase(Utc::now()) == SalePhase::Ended {
                // Nothing can be sold any more: the keys stay gone, Postgres has the rest.
                return Ok(());
            }
            self.parts.rebuild(item).await?;
            self.count_repair(Repair::Rebuilt);
            tracing::warn!(item.id = %item.id, "stock counter was missing: rebuilt from postgres");
            return Ok(());
        };
        let pending_orders: Vec<_> = snapshot.pending.iter().map(|r| r.order).collect();
        let (total, orders, committed_pending) = records::order_counts(
            &self.parts.pool,
            item.id,
            &pending_orders,
            &snapshot.returning,
        )
        .await?;
        let uncommitted = snapshot.pending.len() as i64 - committed_pending;
        // The stored total, not the catalog's: an operator's stock edit reaches this
        // instance's catalog up to a second later.
        let expected = i64::from(total) - orders - uncommitted;
        // With nothing pending, every buyer holds an order and the counter counts them.
        // Counts, not members: comparing a big set member by member would cost Redis and
        // Postgres a full read every round.
        // Without rebuys a released order's buyer stays marked: count them too.
        let buyers = if self.parts.rebuy {
            orders
        } else {
            records::buyer_count(&self.parts.pool, item.id).await?
        };
        let sold_drifted = snapshot.pending.is_empty()
            && (snapshot.buyers != buyers || snapshot.success != orders);
        let sold = if sold_drifted {
            Some(
                records::buyers(
                    &self.parts.pool,
                    item.id,
                    self.parts.rebuy,
                    &snapshot.returning,
                )
                .await?,
            )
        } else {
            None
        };
        if (stock != expected || sold_drifted)
            && self
                .repairs
                .repair_if_unmoved(
                    item.id,
                    &snapshot,
                    expected,
                    sold.as_deref().map(|buyers| (buyers, orders)),
                )
                .await?
        {
            self.count_repair(Repair::Drift);
            tracing::warn!(
                item.id = %item.id, redis = stock, expected, orders, uncommitted,
                redis_buyers = snapshot.buyers, redis_success = snapshot.success,
                "drift repaired"
            );
            self.parts.sold_out.announce(item.id, expected <= 0).await;
        }
        Ok(())
    }

    fn count_repair(&self, kind: Repair) {
        self.parts
            .metrics
            .reconciler_repairs
            .with_label_values(&[kind.label()])
            .inc();
    }
}
