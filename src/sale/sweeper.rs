//! The expiry sweeper: expires pending orders past their deadline and gives back every
//! unit Redis is owed, exactly once to each store (see [`super::orders`] for the life
//! of an order).
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

use super::failpoints::crash_point;
use super::item::{Item, ItemId, SalePhase};
use super::parts::SaleParts;
use super::records::{self, GiveBack};
use super::stock::{GivenBack, Returns};
use crate::vocabulary::OrderState;

/// Orders released per sweep at most: a backlog is worked off over several sweeps.
const SWEEP_BATCH: i64 = 500;

/// Expires pending orders past their deadline and finishes every give-back Redis has
/// not had yet. One instance at a time sweeps (`leader::run_led`, the lock
/// `<prefix>:sweeper:lock`), but a sweep that overlaps another, or a cancellation, is
/// harmless: Postgres's conditional updates and the give-back's guard each act once.
#[derive(Clone)]
pub struct Sweeper {
    parts: SaleParts,
    returns: Arc<Returns>,
}

impl Sweeper {
    /// Over the shared parts.
    pub fn new(parts: &SaleParts) -> Self {
        Self {
            returns: Arc::new(Returns::new(parts.redis.clone(), parts.lifetime)),
            parts: parts.clone(),
        }
    }

    /// Sweeps every `interval`, forever; `instance` names this process in the lock.
    pub async fn run(self, interval: Duration, instance: String) {
        let sweeper = Arc::new(self);
        let redis = sweeper.parts.redis.store().clone();
        super::leader::run_led("sweeper", interval, redis, instance, || {
            let sweeper = Arc::clone(&sweeper);
            async move { sweeper.sweep().await.map(drop) }
        })
        .await
    }

    /// One sweep: expire what is due, then give back every unit Redis is owed (those
    /// just expired, and any an earlier sweep or cancellation left half done), item by
    /// item. Answers how many orders it expired.
    pub async fn sweep(&self) -> anyhow::Result<usize> {
        let expired = records::expire_due(&self.parts.pool, SWEEP_BATCH).await?;
        self.parts
            .metrics
            .order_transitions
            .with_label_values(&[OrderState::Expired.as_str()])
            .inc_by(expired.len() as u64);
        let mut failure = None;
        for item in records::owing_items(&self.parts.pool).await? {
            let owed = records::unreturned(&self.parts.pool, item, SWEEP_BATCH, None).await?;
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
            let mut given = self
                .returns
                .give_back(order, &item, self.parts.rebuy)
                .await?;
            if given == GivenBack::KeysGone
                && !rebuilt
                && item.phase(Utc::now()) != SalePhase::Ended
            {
                // Still on sale: its units must be sellable again, so its keys come back
                // from Postgres first (counting this order as owed), then the unit.
                self.parts.rebuild(&item).await?;
                rebuilt = true;
                given = self
                    .returns
                    .give_back(order, &item, self.parts.rebuy)
                    .await?;
            }
            match given {
                GivenBack::Now => {
                    self.parts.sold_out.announce(order.item, false).await;
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
        let marked = records::mark_returned(&self.parts.pool, &returned).await?;
        self.parts.metrics.units_returned.inc_by(marked);
        self.returns.forget_returning(id, &returned).await
    }

    /// The item from the catalog, reloaded once when this instance has not seen it yet.
    async fn item(&self, id: ItemId) -> anyhow::Result<Arc<Item>> {
        if let Some(item) = self.parts.catalog.get(id) {
            return Ok(item);
        }
        self.parts.catalog.reload(&self.parts.pool).await?;
        self.parts
            .catalog
            .get(id)
            .with_context(|| format!("item {id} is not in the catalog"))
    }
}
