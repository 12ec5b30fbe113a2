//! The flash sale: items, the purchase flow, orders.
//!
//! A purchase, in this order (cheapest refusals first):
//! 1. item state from the in-process [`catalog::Catalog`]: unknown, not started, ended
//!    (no Redis call, no quota);
//! 2. the `seckill` limiter policy: `api`, `user`, `ip` in one atomic script call
//!    (fails closed: without Redis there is no stock to sell);
//! 3. the stock reservation script (`lua/reserve_stock.lua`): sale window on the Redis
//!    clock, one order per user, stock left; decrement and mark the buyer;
//! 4. the success pipeline (MULTI/EXEC): counter, per-user marker, order hash;
//! 5. the Postgres commit: conditional decrement + order insert, one transaction.
//!
//! When step 5 does not succeed, Redis is repaired to agree with Postgres
//! (`lua/undo_reservation.lua`); Postgres is the final guard against overselling.

pub mod catalog;
pub mod item;
pub mod postgres;
pub mod redis;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::UserId;
use crate::limiter::policy::SECKILL_POLICY;
use crate::limiter::{Admission, Caller, Limiter, Rejection};
use catalog::Catalog;
use item::{Item, ItemId, NewItem, SalePhase};
use postgres::{CommitError, Order};
use redis::{Reservation, SaleRedis, Undo};

/// Why a purchase did not produce an order.
#[derive(Debug, thiserror::Error)]
pub enum SaleError {
    #[error("no such item")]
    ItemNotFound,
    #[error("the sale has not started yet")]
    NotStarted,
    #[error("the sale has ended")]
    Ended,
    #[error("you already bought this item")]
    AlreadyPurchased,
    #[error("sold out")]
    SoldOut,
    #[error(transparent)]
    Limited(#[from] Rejection),
    /// The order could not be placed; Redis was repaired (or left to the reconciler).
    #[error("the order could not be placed: {0:#}")]
    OrderFailed(anyhow::Error),
}

/// A successful purchase and the limiter's admission (for its headers).
pub struct Purchase {
    pub order: Order,
    pub admission: Admission,
}

pub struct Sale {
    pool: PgPool,
    redis: SaleRedis,
    catalog: Catalog,
    limiter: Arc<Limiter>,
    commit_timeout: Duration,
}

impl Sale {
    pub fn new(
        pool: PgPool,
        redis: SaleRedis,
        limiter: Arc<Limiter>,
        commit_timeout: Duration,
    ) -> Self {
        Self {
            pool,
            redis,
            catalog: Catalog::default(),
            limiter,
            commit_timeout,
        }
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Loads the catalog and puts every unended item's stock into Redis where it is
    /// missing. Run at start-up; never overwrites a live counter.
    pub async fn warm_up(&self) -> anyhow::Result<()> {
        self.catalog.reload(&self.pool).await?;
        for item in self.catalog.unended(Utc::now()) {
            self.restore(&item).await?;
        }
        Ok(())
    }

    /// Rebuilds an item's Redis state from Postgres where it is missing.
    async fn restore(&self, item: &Item) -> anyhow::Result<()> {
        let current = postgres::item_remaining(&self.pool, item.id).await?;
        let buyers = postgres::buyers(&self.pool, item.id).await?;
        if self.redis.restore(item.id, current, &buyers).await? {
            tracing::info!(item.id = %item.id, remaining = current, buyers = buyers.len(), "stock loaded into redis");
        }
        Ok(())
    }

    pub async fn create_item(&self, new: NewItem) -> anyhow::Result<Item> {
        let item = postgres::insert_item(&self.pool, &new).await?;
        self.redis
            .restore(item.id, item.remaining_stock, &[])
            .await?;
        self.catalog.reload(&self.pool).await?;
        tracing::info!(item.id = %item.id, stock = item.total_stock, "item created");
        Ok(item)
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

    pub async fn purchase(
        &self,
        user: UserId,
        item_id: ItemId,
        caller: &Caller<'_>,
    ) -> Result<Purchase, SaleError> {
        let item = self.catalog.get(item_id).ok_or(SaleError::ItemNotFound)?;
        match item.phase(Utc::now()) {
            SalePhase::NotStarted => return Err(SaleError::NotStarted),
            SalePhase::Ended => return Err(SaleError::Ended),
            SalePhase::Open => {}
        }
        let admission = self.limiter.check(SECKILL_POLICY, None, caller).await?;

        let mut reservation = self
            .redis
            .reserve(&item, user)
            .await
            .map_err(SaleError::OrderFailed)?;
        if reservation == Reservation::Missing {
            tracing::warn!(item.id = %item.id, "stock missing in redis, rebuilding from postgres");
            self.restore(&item).await.map_err(SaleError::OrderFailed)?;
            reservation = self
                .redis
                .reserve(&item, user)
                .await
                .map_err(SaleError::OrderFailed)?;
        }
        match reservation {
            Reservation::Reserved { .. } => {}
            Reservation::NotStarted => return Err(SaleError::NotStarted),
            Reservation::Ended => return Err(SaleError::Ended),
            Reservation::AlreadyPurchased => return Err(SaleError::AlreadyPurchased),
            Reservation::SoldOut => return Err(SaleError::SoldOut),
            Reservation::Missing => {
                return Err(SaleError::OrderFailed(anyhow::anyhow!(
                    "stock still missing after a rebuild"
                )))
            }
        }

        let order_id = Uuid::new_v4();
        if let Err(e) = self.redis.record_success(item.id, user, order_id).await {
            self.repair(&item, user, order_id, Undo::Release, false)
                .await;
            return Err(SaleError::OrderFailed(e));
        }
        let order = self.commit(&item, user, order_id).await?;
        Ok(Purchase { order, admission })
    }

    /// Step 5 and, when it does not succeed, the repair of Redis.
    async fn commit(&self, item: &Item, user: UserId, order_id: Uuid) -> Result<Order, SaleError> {
        let commit = postgres::commit_order(&self.pool, order_id, user, item.id);
        let outcome = match tokio::time::timeout(self.commit_timeout, commit).await {
            Ok(outcome) => outcome,
            Err(_) => Err(CommitError::Unknown(anyhow::anyhow!(
                "no answer within {:?}",
                self.commit_timeout
            ))),
        };
        match outcome {
            Ok(order) => Ok(order),
            Err(CommitError::SoldOut) => {
                self.repair(item, user, order_id, Undo::SoldOut, true).await;
                Err(SaleError::SoldOut)
            }
            Err(CommitError::AlreadyPurchased) => {
                let existing_order = postgres::order_of(&self.pool, user, item.id)
                    .await
                    .ok()
                    .flatten()
                    .map(|o| o.id);
                self.repair(
                    item,
                    user,
                    order_id,
                    Undo::KeepBuyer { existing_order },
                    true,
                )
                .await;
                Err(SaleError::AlreadyPurchased)
            }
            Err(CommitError::Failed(e)) => {
                self.repair(item, user, order_id, Undo::Release, true).await;
                Err(SaleError::OrderFailed(e))
            }
            Err(CommitError::Unknown(e)) => match postgres::order_by_id(&self.pool, order_id).await
            {
                Ok(Some(order)) => Ok(order),
                Ok(None) => {
                    self.repair(item, user, order_id, Undo::Release, true).await;
                    Err(SaleError::OrderFailed(e))
                }
                // Cannot tell: leave Redis as it is (the reservation stands) rather than
                // risk releasing a unit that was sold. Postgres still guards the stock.
                Err(lookup) => Err(SaleError::OrderFailed(
                    e.context(format!("order lookup failed too: {lookup:#}")),
                )),
            },
        }
    }

    async fn repair(
        &self,
        item: &Item,
        user: UserId,
        order_id: Uuid,
        how: Undo,
        pipeline_ran: bool,
    ) {
        if let Err(e) = self
            .redis
            .undo(item.id, user, order_id, how, pipeline_ran)
            .await
        {
            tracing::error!(item.id = %item.id, user.id = %user, error = %format!("{e:#}"), "could not repair redis after a failed order");
        }
    }
}
