//! After the click: an order is `pending_payment` until its shopper pays or cancels it,
//! or its deadline passes and the [`Sweeper`] expires it. A cancelled or expired order
//! gives its unit back exactly once, to Postgres (in the transition's own transaction,
//! see [`postgres::transition`] / [`postgres::expire_due`]) and then to Redis
//! ([`SaleRedis::give_back`], guarded per order), after which Postgres marks it
//! `returned_at`. A crash between the two stores leaves the order unmarked; the next
//! sweep gives it back (a no-op if Redis already had it) and marks it. The sold-out flag
//! is lifted everywhere once a unit is back.
//!
//! Whatever one item's Redis state, the others' returns go on: the sweeper works item by
//! item, an item on sale whose keys were lost is rebuilt from Postgres before its units
//! come back, and an ended item whose keys are gone has its units recorded in Postgres
//! alone (nothing can be sold from Redis any more).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use sqlx::PgPool;
use uuid::Uuid;

use super::catalog::Catalog;
use super::failpoints::crash_point;
use super::item::{Item, ItemId, SalePhase};
use super::postgres::{self, GiveBack, Moved, Order, OrderState, Transition};
use super::redis::{GivenBack, SaleRedis};
use super::sold_out::SoldOut;
use super::Sale;
use crate::domain::UserId;
use crate::metrics::Metrics;

/// How orders live after the click (settings `payment_deadline_secs`,
/// `rebuy_after_release`).
#[derive(Debug, Clone, Copy)]
pub struct OrderLife {
    /// How long a shopper has to pay.
    pub pay_within: Duration,
    /// Whether a shopper whose order was cancelled or expired may buy the item again.
    pub rebuy: bool,
}

/// Why a shopper's transition was refused.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    #[error("no such order")]
    NotFound,
    /// Only a `pending_payment` order can be paid or cancelled.
    #[error("the order is {}, not pending payment", .0.as_str())]
    State(OrderState),
    /// The order is paid already (a retried payment answers it again).
    #[error("the order is paid, not pending payment")]
    Paid(Box<Order>),
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

/// Orders released per sweep at most: a backlog is worked off over several sweeps.
const SWEEP_BATCH: i64 = 500;

impl Sale {
    /// Pays `user`'s order `id` (a stand-in for a payment provider's confirmation). A
    /// `retry` (the request carries an `Idempotency-Key`) of a payment that succeeded
    /// answers the paid order again instead of refusing it.
    pub async fn pay(&self, user: UserId, id: Uuid, retry: bool) -> Result<Order, OrderError> {
        match self.move_order(user, id, Transition::Pay).await {
            Err(OrderError::Paid(order)) if retry => Ok(*order),
            Err(OrderError::Paid(_)) => Err(OrderError::State(OrderState::Paid)),
            other => other,
        }
    }

    /// Cancels `user`'s order `id`; its unit goes back to the sale.
    pub async fn cancel(&self, user: UserId, id: Uuid) -> Result<Order, OrderError> {
        let order = match self.move_order(user, id, Transition::Cancel).await {
            Err(OrderError::Paid(_)) => Err(OrderError::State(OrderState::Paid)),
            other => other,
        }?;
        let released = GiveBack {
            order: order.id,
            user: order.user_id,
            item: order.item_id,
        };
        // Best effort now; the sweeper finishes whatever this could not.
        if let Err(e) = self.sweeper().give_back(&[released]).await {
            tracing::warn!(order.id = %order.id, error = %format!("{e:#}"), "give-back left to the sweeper");
        }
        Ok(order)
    }

    async fn move_order(
        &self,
        user: UserId,
        id: Uuid,
        transition: Transition,
    ) -> Result<Order, OrderError> {
        match postgres::transition(&self.pool, id, user, transition).await? {
            Moved::Done(order) => {
                self.metrics
                    .order_transitions
                    .with_label_values(&[order.state.as_str()])
                    .inc();
                Ok(order)
            }
            // Pending but past its deadline: expired in all but the sweeper's write.
            Moved::Refused(order) if order.state == OrderState::PendingPayment => {
                Err(OrderError::State(OrderState::Expired))
            }
            Moved::Refused(order) if order.state == OrderState::Paid => {
                Err(OrderError::Paid(Box::new(order)))
            }
            Moved::Refused(order) => Err(OrderError::State(order.state)),
            Moved::NotFound => Err(OrderError::NotFound),
        }
    }

    /// Orders of each item on sale by state, for the dashboard: item id → state → count.
    pub async fn order_states(
        &self,
        items: &[super::item::ItemId],
    ) -> anyhow::Result<
        std::collections::BTreeMap<i64, std::collections::BTreeMap<&'static str, i64>>,
    > {
        postgres::states_by_item(&self.pool, items).await
    }

    /// The expiry sweeper over this sale's stores.
    pub fn sweeper(&self) -> Sweeper {
        Sweeper {
            pool: self.pool.clone(),
            redis: Arc::clone(&self.redis),
            catalog: Arc::clone(&self.catalog),
            sold_out: Arc::clone(&self.sold_out),
            metrics: Arc::clone(&self.metrics),
            rebuy: self.life.rebuy,
        }
    }
}

/// Expires pending orders past their deadline and finishes every give-back Redis has
/// not had yet. One instance at a time sweeps (the Redis lock `<prefix>:sweeper:lock`,
/// like the reconciler's), but a sweep that overlaps another, or a cancellation, is
/// harmless: Postgres's conditional updates and the give-back's guard each act once.
pub struct Sweeper {
    pool: PgPool,
    redis: Arc<SaleRedis>,
    catalog: Arc<Catalog>,
    sold_out: Arc<SoldOut>,
    metrics: Arc<Metrics>,
    rebuy: bool,
}

impl Sweeper {
    /// Sweeps every `interval`, forever; `instance` names this process in the lock.
    pub async fn run(self, interval: Duration, instance: String) {
        let sweeper = Arc::new(self);
        crate::background::every("expiry sweeper", interval, || {
            let sweeper = Arc::clone(&sweeper);
            let instance = instance.clone();
            async move {
                if sweeper
                    .lead(interval, &instance)
                    .await
                    .context("sweeper lock")?
                {
                    sweeper.sweep().await.context("expiry sweep")?;
                }
                Ok(())
            }
        })
        .await
    }

    async fn lead(&self, interval: Duration, instance: &str) -> anyhow::Result<bool> {
        let store = self.redis.store();
        let mut lock = ::redis::cmd("SET");
        lock.arg(format!("{}:sweeper:lock", store.prefix()))
            .arg(instance)
            .arg("NX")
            .arg("PX")
            .arg(interval.as_millis().max(1) as u64);
        let taken: Option<String> = store
            .call(crate::metrics::RedisPurpose::Other, &lock)
            .await?;
        Ok(taken.is_some())
    }

    /// One sweep: expire what is due, then give back every unit Redis is owed (those
    /// just expired, and any an earlier sweep or cancellation left half done), item by
    /// item. Answers how many orders it expired.
    pub async fn sweep(&self) -> anyhow::Result<usize> {
        let expired = postgres::expire_due(&self.pool, SWEEP_BATCH).await?;
        self.metrics
            .order_transitions
            .with_label_values(&[OrderState::Expired.as_str()])
            .inc_by(expired.len() as u64);
        let mut failure = None;
        for item in postgres::owing_items(&self.pool).await? {
            let owed = postgres::unreturned(&self.pool, item, SWEEP_BATCH, None).await?;
            // Failpoint `sale::before_give_back` (`return(<user id>)`): while it is on,
            // every sweep owing that user's unit stops between the two stores, as if its
            // process had died there.
            if owed
                .iter()
                .any(|o| crash_point("sale::before_give_back", o.user))
            {
                anyhow::bail!("injected: the sweeper died before the give-back");
            }
            if let Err(e) = self.give_back(&owed).await {
                failure.get_or_insert(e);
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(expired.len()),
        }
    }

    /// Gives `released` back to Redis and marks in Postgres those Redis now has (or
    /// whose item's keys are gone with its sale), item by item: an item that fails is
    /// reported after the others have had their turn.
    pub async fn give_back(&self, released: &[GiveBack]) -> anyhow::Result<()> {
        let mut by_item: BTreeMap<ItemId, Vec<GiveBack>> = BTreeMap::new();
        for order in released {
            by_item.entry(order.item).or_default().push(*order);
        }
        let mut failure = None;
        for (item, orders) in by_item {
            if let Err(e) = self.give_back_item(item, &orders).await {
                tracing::warn!(item.id = %item, error = %format!("{e:#}"), "give-back failed; retried next sweep");
                failure.get_or_insert(e);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    async fn give_back_item(&self, id: ItemId, orders: &[GiveBack]) -> anyhow::Result<()> {
        let item = self.item(id).await?;
        let mut returned = Vec::with_capacity(orders.len());
        let mut rebuilt = false;
        for order in orders {
            let mut given = self.redis.give_back(order, &item, self.rebuy).await?;
            if given == GivenBack::KeysGone
                && !rebuilt
                && item.phase(Utc::now()) != SalePhase::Ended
            {
                // Still on sale: its units must be sellable again, so its keys come back
                // from Postgres first (counting this order as owed), then the unit.
                super::restore(&self.pool, &self.redis, &item, self.rebuy).await?;
                rebuilt = true;
                given = self.redis.give_back(order, &item, self.rebuy).await?;
            }
            match given {
                GivenBack::Now => {
                    self.sold_out.announce(order.item, false).await;
                    returned.push(order.order);
                }
                GivenBack::Before => returned.push(order.order),
                GivenBack::KeysGone if item.phase(Utc::now()) == SalePhase::Ended => {
                    // Ended with its keys gone: Postgres has the unit (the release put it
                    // in `items`), and there is no Redis state left to give it to.
                    returned.push(order.order);
                }
                GivenBack::KeysGone => {
                    anyhow::bail!("item {id}'s stock counter is still missing after a rebuild")
                }
            }
        }
        // Failpoint `sale::before_mark_returned` (`return(<user id>)`): Redis has the
        // unit, Postgres never hears of it, as if the process had died in between.
        if orders
            .iter()
            .any(|o| crash_point("sale::before_mark_returned", o.user))
        {
            anyhow::bail!("injected: died before marking the give-back");
        }
        let marked = postgres::mark_returned(&self.pool, &returned).await?;
        self.metrics.units_returned.inc_by(marked);
        self.redis.forget_returning(id, &returned).await
    }

    /// The item from the catalog, reloaded once when this instance has not seen it yet.
    async fn item(&self, id: ItemId) -> anyhow::Result<Arc<Item>> {
        if let Some(item) = self.catalog.get(id) {
            return Ok(item);
        }
        self.catalog.reload(&self.pool).await?;
        self.catalog
            .get(id)
            .with_context(|| format!("item {id} is not in the catalog"))
    }
}
