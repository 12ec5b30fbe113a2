//! The flash sale: items, the purchase flow, orders, and keeping Redis honest.
//!
//! [`Sale`] holds the parts every purchase needs; this file has its construction, the
//! item administration and the read-only queries (listings, orders). The purchase flow
//! is in [`purchase`], every way it can end in [`error`]. Stock lives in Redis
//! ([`redis`]), orders in Postgres ([`postgres`], written in batches by [`batches`]),
//! items in the in-process [`catalog`]. The [`reconciler`], the [`consistency`] export
//! and the [`sold_out`] board are types of their own over the same parts.
//!
//! A purchase, in this order (cheapest refusals first):
//! 1. item state from the in-process [`catalog::Catalog`]: unknown, not started, ended,
//!    and the [`sold_out::SoldOut`] board (no Redis call, no quota);
//! 2. the `seckill` limiter policy: `api`, `user`, `ip` in one atomic script call
//!    (fails closed: without Redis there is no stock to sell);
//! 3. the stock reservation script (`lua/reserve_stock.lua`): sale window on the Redis
//!    clock, one order per user, stock left; decrement, mark the buyer, and record the
//!    reservation as pending with a deadline;
//! 4. the success pipeline (MULTI/EXEC): counter, per-user marker, order hash;
//! 5. the Postgres commit: conditional decrement + order insert, one transaction, on a
//!    pool of its own;
//! 6. the pending record is cleared.
//!
//! When step 5 does not succeed, Redis is repaired to agree with Postgres
//! (`lua/undo_reservation.lua`). When its COMMIT goes unanswered, Postgres is asked what
//! became of the transaction (`txid_status`): committed is a success, aborted is undone,
//! still running is left pending (the client hears 202 `ORDER_PENDING`). When the
//! process dies between 3 and 6, the [`reconciler`] finds the overdue pending record and
//! settles it from Postgres the same way. Postgres is the final guard against
//! overselling throughout.

pub mod batches;
pub mod catalog;
pub mod committer;
pub mod consistency;
pub mod error;
mod failpoints;
pub mod item;
pub mod life_cycle;
pub mod postgres;
pub mod purchase;
pub mod reconciler;
pub mod redis;
pub mod sold_out;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::UserId;
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use batches::BatchWriter;
use catalog::Catalog;
use committer::{Batching, Committer, Queue};
use consistency::ConsistencyExport;
use error::OutcomeCounters;
pub use error::{Outcome, Replayable, SaleError};
use item::{Item, ItemId, NewItem};
use life_cycle::OrderLife;
use postgres::Order;
pub use purchase::{Purchase, PurchaseFailure};
use reconciler::Reconciler;
use redis::SaleRedis;
use sold_out::SoldOut;

pub struct Sale {
    pool: PgPool,
    /// Order commits only: reads and admin work use `pool` and can never make a commit
    /// wait for a connection.
    commit_pool: PgPool,
    /// Hands orders to the one committer of this instance (group commit).
    committer: Committer,
    redis: Arc<SaleRedis>,
    catalog: Arc<Catalog>,
    sold_out: Arc<SoldOut>,
    limiter: Arc<Limiter>,
    metrics: Arc<Metrics>,
    outcomes: OutcomeCounters,
    commit_timeout: Duration,
    life: OrderLife,
}

impl Sale {
    pub fn new(
        pool: PgPool,
        commit_pool: PgPool,
        committer: Committer,
        redis: SaleRedis,
        limiter: Arc<Limiter>,
        metrics: Arc<Metrics>,
        (commit_timeout, life): (Duration, OrderLife),
    ) -> Self {
        Self {
            pool,
            commit_pool,
            committer,
            sold_out: Arc::new(SoldOut::new(redis.store().clone(), Arc::clone(&metrics))),
            redis: Arc::new(redis),
            catalog: Arc::default(),
            limiter,
            outcomes: OutcomeCounters::new(&metrics.sale_outcomes),
            metrics,
            commit_timeout,
            life,
        }
    }

    pub fn commit_pool(&self) -> &PgPool {
        &self.commit_pool
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The sold-out board, for its channel's listener.
    pub fn sold_out(&self) -> Arc<SoldOut> {
        Arc::clone(&self.sold_out)
    }

    pub fn reconciler(&self) -> Reconciler {
        Reconciler {
            pool: self.pool.clone(),
            redis: Arc::clone(&self.redis),
            catalog: Arc::clone(&self.catalog),
            sold_out: Arc::clone(&self.sold_out),
            metrics: Arc::clone(&self.metrics),
            rebuy: self.life.rebuy,
            sweeper: self.sweeper(),
        }
    }

    pub fn consistency_export(&self) -> ConsistencyExport {
        ConsistencyExport {
            pool: self.pool.clone(),
            redis: Arc::clone(&self.redis),
            catalog: Arc::clone(&self.catalog),
            metrics: Arc::clone(&self.metrics),
        }
    }

    /// The committer's loop (see [`committer`] and [`batches`]): runs until the app
    /// stops, then commits what is still queued.
    pub async fn run_committer(self: Arc<Self>, queue: Queue, batching: Batching) {
        let writer = BatchWriter {
            commit_pool: self.commit_pool.clone(),
            redis: Arc::clone(&self.redis),
            metrics: Arc::clone(&self.metrics),
            commit_timeout: self.commit_timeout,
            pay_within: self.life.pay_within,
        };
        writer.run(queue, batching).await;
    }

    /// Orders waiting for the committer (read at scrape time).
    pub fn commit_queue_len(&self) -> usize {
        self.committer.queued()
    }

    pub async fn reload_catalog(&self) -> anyhow::Result<()> {
        self.catalog.reload(&self.pool).await
    }

    /// Loads the catalog and puts every unended item's stock into Redis where it is
    /// missing. Run at start-up; never overwrites a live counter.
    pub async fn warm_up(&self) -> anyhow::Result<()> {
        self.catalog.reload(&self.pool).await?;
        for item in self.catalog.unended(Utc::now()) {
            self.restore(&item).await?;
        }
        self.refresh_sold_out().await
    }

    pub async fn create_item(&self, new: NewItem) -> anyhow::Result<Item> {
        let item = postgres::insert_item(&self.pool, &new).await?;
        let ledger = postgres::ItemLedger {
            remaining: item.remaining_stock,
            owed: Vec::new(),
            buyers: Vec::new(),
        };
        self.redis.restore(&item, &ledger).await?;
        self.catalog.reload(&self.pool).await?;
        tracing::info!(item.id = %item.id, stock = item.total_stock, "item created");
        Ok(item)
    }

    /// Pauses or resumes an item's sale; `None` when there is no such item. Other
    /// instances see it at their next catalog reload (within a second).
    pub async fn set_paused(&self, item: ItemId, paused: bool) -> anyhow::Result<Option<Item>> {
        let updated = postgres::set_paused(&self.pool, item, paused).await?;
        self.catalog.reload(&self.pool).await?;
        Ok(updated)
    }

    /// Rebuilds `item`'s Redis state from Postgres where it is missing (see [`restore`]).
    async fn restore(&self, item: &Item) -> anyhow::Result<()> {
        restore(&self.pool, &self.redis, item, self.life.rebuy).await
    }

    /// One item's live stock from Redis.
    pub async fn live_stock(&self, item: ItemId) -> Option<i64> {
        self.redis
            .remaining(&[item])
            .await
            .ok()?
            .into_iter()
            .next()
            .flatten()
    }

    pub async fn search_orders(
        &self,
        filter: &postgres::OrderFilter,
    ) -> anyhow::Result<(Vec<Order>, i64)> {
        postgres::search_orders(&self.pool, filter).await
    }

    /// Items on sale or coming up, with their live remaining stock (Redis; Postgres's
    /// count when Redis cannot answer).
    pub async fn listing(&self) -> Vec<(Arc<Item>, i64)> {
        let items = self.catalog.unended(Utc::now());
        let ids: Vec<_> = items.iter().map(|i| i.id).collect();
        let live = self.redis.remaining(&ids).await.unwrap_or_else(|e| {
            tracing::warn!(error = %format!("{e:#}"), "live stock unavailable, showing postgres counts");
            vec![None; ids.len()]
        });
        items
            .into_iter()
            .zip(live)
            .map(|(item, live)| {
                let remaining = live.unwrap_or(i64::from(item.remaining_stock));
                (item, remaining)
            })
            .collect()
    }

    pub async fn orders_of(&self, user: UserId) -> anyhow::Result<Vec<Order>> {
        postgres::orders_of_user(&self.pool, user).await
    }

    /// The order `id` of `user`, if it was committed (a retry meeting a stale claim).
    pub async fn committed_order(&self, id: Uuid, user: UserId) -> anyhow::Result<Option<Order>> {
        Ok(postgres::order_by_id(&self.pool, id)
            .await?
            .filter(|order| order.user_id == user))
    }

    /// The safety net under pub/sub: one MGET of every unended item's stock, which
    /// also feeds `seckill_stock_remaining`.
    pub async fn refresh_sold_out(&self) -> anyhow::Result<()> {
        let items = self.catalog.unended(Utc::now());
        let ids: Vec<_> = items.iter().map(|i| i.id).collect();
        let stocks = self.redis.remaining(&ids).await?;
        consistency::retain_item_series(&self.catalog, &self.metrics.stock_remaining, &ids);
        for (id, stock) in ids.iter().zip(stocks) {
            if let Some(stock) = stock {
                self.sold_out.note(*id, stock <= 0);
                self.metrics
                    .stock_remaining
                    .with_label_values(&[&id.to_string()])
                    .set(stock);
            }
        }
        Ok(())
    }
}

/// Rebuilds an item's Redis state from Postgres where it is missing (Redis lost its
/// data, or the keys expired): see `lua/restore_item.lua`, which counts the released
/// units Redis has not had back yet, and buyers = users holding an order.
async fn restore(pool: &PgPool, redis: &SaleRedis, item: &Item, rebuy: bool) -> anyhow::Result<()> {
    let ledger = postgres::item_ledger(pool, item.id, rebuy).await?;
    if redis.restore(item, &ledger).await? {
        tracing::info!(item.id = %item.id, remaining = ledger.remaining, owed = ledger.owed.len(), buyers = ledger.buyers.len(), "item state loaded into redis");
    }
    Ok(())
}
