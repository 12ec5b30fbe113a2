//! The flash sale: items, the purchase flow, orders, and keeping Redis honest.
//!
//! A purchase, in this order (cheapest refusals first):
//! 1. item state from the in-process [`catalog::Catalog`]: unknown, not started, ended,
//!    and the [`sold_out::SoldOutBoard`] (no Redis call, no quota);
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

pub mod catalog;
pub mod committer;
pub mod idempotency;
pub mod item;
pub mod postgres;
pub mod reconciler;
pub mod redis;
pub mod sold_out;

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use sqlx::PgPool;
use uuid::Uuid;

use crate::configuration::policies::SECKILL_POLICY;
use crate::domain::UserId;
use crate::limiter::{Admission, Caller, Limiter, Rejection};
use crate::metrics::{Metrics, RedisPurpose};
use catalog::Catalog;
use committer::{Batching, Committer, Queue};
use item::{Item, ItemId, NewItem, SalePhase};
use postgres::{CommitError, NewOrder, Order};
use redis::{PendingReservation, Reservation, SaleRedis, Undo};
use sold_out::SoldOutBoard;

/// Why a purchase did not produce an order.
#[derive(Debug, thiserror::Error)]
pub enum SaleError {
    #[error("no such item")]
    ItemNotFound,
    #[error("the sale has not started yet")]
    NotStarted,
    #[error("the sale has ended")]
    Ended,
    #[error("the sale is paused")]
    Paused,
    #[error("you already bought this item")]
    AlreadyPurchased,
    #[error("sold out")]
    SoldOut,
    #[error(transparent)]
    Limited(#[from] Rejection),
    /// The order could not be placed; Redis was repaired (or left to the reconciler).
    #[error("the order could not be placed: {0:#}")]
    OrderFailed(anyhow::Error),
    /// The order's COMMIT is still running in Postgres: it may yet land. The reservation
    /// stays pending and the reconciler settles it either way.
    #[error("the order is still being committed")]
    OrderPending(Uuid),
}

impl SaleError {
    /// Whether the answer stands for good (an idempotent retry gets the same one):
    /// not found, sold out, already purchased, not started, ended. A paused sale, a
    /// limiter refusal and a failed order are worth retrying.
    pub fn is_final(&self) -> bool {
        !matches!(
            self,
            Self::Paused | Self::Limited(_) | Self::OrderFailed(_) | Self::OrderPending(_)
        )
    }
}

/// The label of a refused purchase in `seckill_sale_outcomes_total`.
fn outcome(error: &SaleError) -> &'static str {
    match error {
        SaleError::ItemNotFound => "not_found",
        SaleError::NotStarted => "not_started",
        SaleError::Ended => "ended",
        SaleError::Paused => "paused",
        SaleError::AlreadyPurchased => "already_purchased",
        SaleError::SoldOut => "sold_out",
        SaleError::Limited(Rejection::Refused(_)) => "rate_limited",
        SaleError::Limited(_) => "limiter_unavailable",
        SaleError::OrderFailed(_) => "order_failed",
        SaleError::OrderPending(_) => "order_pending",
    }
}

/// A successful purchase and the limiter's admission (for its headers).
pub struct Purchase {
    pub order: Order,
    pub admission: Admission,
}

/// A purchase that made no order. Refusals after the limiter keep its admission, so the
/// answer still carries the quota headers: a client (and the load generator's checker)
/// can tell "the limiter let me through, the stock did not" from "refused before the
/// limiter".
#[derive(Debug)]
pub struct PurchaseFailure {
    pub error: SaleError,
    pub admission: Option<Admission>,
}

impl From<SaleError> for PurchaseFailure {
    fn from(error: SaleError) -> Self {
        Self {
            error,
            admission: None,
        }
    }
}

impl From<Rejection> for PurchaseFailure {
    fn from(rejection: Rejection) -> Self {
        SaleError::from(rejection).into()
    }
}

pub struct Sale {
    pool: PgPool,
    /// Order commits only: reads and admin work use `pool` and can never make a commit
    /// wait for a connection.
    commit_pool: PgPool,
    /// Hands orders to the one committer of this instance (group commit).
    committer: Committer,
    redis: SaleRedis,
    catalog: Catalog,
    board: SoldOutBoard,
    limiter: Arc<Limiter>,
    metrics: Arc<Metrics>,
    commit_timeout: Duration,
}

impl Sale {
    pub fn new(
        pool: PgPool,
        commit_pool: PgPool,
        committer: Committer,
        redis: SaleRedis,
        limiter: Arc<Limiter>,
        metrics: Arc<Metrics>,
        commit_timeout: Duration,
    ) -> Self {
        Self {
            pool,
            commit_pool,
            committer,
            redis,
            catalog: Catalog::default(),
            board: SoldOutBoard::default(),
            limiter,
            metrics,
            commit_timeout,
        }
    }

    pub fn commit_pool(&self) -> &PgPool {
        &self.commit_pool
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
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

    /// Rebuilds an item's Redis state from Postgres where it is missing (Redis lost its
    /// data): stock = Postgres's remaining count, buyers = users holding an order.
    async fn restore(&self, item: &Item) -> anyhow::Result<()> {
        let current = postgres::item_remaining(&self.pool, item.id).await?;
        let buyers = postgres::buyers(&self.pool, item.id).await?;
        if self.redis.restore(item.id, current, &buyers).await? {
            tracing::info!(item.id = %item.id, remaining = current, buyers = buyers.len(), "item state loaded into redis");
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

    /// Pauses or resumes an item's sale; `None` when there is no such item. Other
    /// instances see it at their next catalog reload (within a second).
    pub async fn set_paused(&self, item: ItemId, paused: bool) -> anyhow::Result<Option<Item>> {
        let updated = postgres::set_paused(&self.pool, item, paused).await?;
        self.catalog.reload(&self.pool).await?;
        Ok(updated)
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

    /// Step 1: the answers that need no Redis call and no quota. A refusal here is
    /// counted as the purchase's outcome.
    pub fn precheck(&self, item_id: ItemId) -> Result<Arc<Item>, SaleError> {
        let checked = self.check_open(item_id);
        if let Err(error) = &checked {
            self.metrics.sale_outcome(outcome(error));
        }
        checked
    }

    fn check_open(&self, item_id: ItemId) -> Result<Arc<Item>, SaleError> {
        let item = self.catalog.get(item_id).ok_or(SaleError::ItemNotFound)?;
        match item.phase(Utc::now()) {
            SalePhase::NotStarted => return Err(SaleError::NotStarted),
            SalePhase::Ended => return Err(SaleError::Ended),
            SalePhase::Open => {}
        }
        if item.paused {
            return Err(SaleError::Paused);
        }
        if self.board.is_sold_out(item.id) {
            return Err(SaleError::SoldOut);
        }
        Ok(item)
    }

    /// Steps 2 to 6 for an item that passed [`Self::precheck`]: the limiter, then the
    /// reservation and the order `order_id`.
    pub async fn purchase(
        &self,
        item: &Item,
        user: UserId,
        order_id: Uuid,
        caller: &Caller<'_>,
    ) -> Result<Purchase, PurchaseFailure> {
        let result = self.limited_purchase(item, user, order_id, caller).await;
        self.metrics.sale_outcome(match &result {
            Ok(_) => "created",
            Err(failure) => outcome(&failure.error),
        });
        result
    }

    /// An idempotent replay answered a purchase without running it.
    pub fn record_replay(&self) {
        self.metrics.sale_outcome("idempotent_replay");
    }

    /// The order `id` of `user`, if it was committed (a retry meeting a stale claim).
    pub async fn committed_order(&self, id: Uuid, user: UserId) -> anyhow::Result<Option<Order>> {
        Ok(postgres::order_by_id(&self.pool, id)
            .await?
            .filter(|order| order.user_id == user))
    }

    async fn limited_purchase(
        &self,
        item: &Item,
        user: UserId,
        order_id: Uuid,
        caller: &Caller<'_>,
    ) -> Result<Purchase, PurchaseFailure> {
        let admission = self.limiter.check(SECKILL_POLICY, None, caller).await?;
        match self.reserve_and_order(item, user, order_id).await {
            Ok(order) => Ok(Purchase { order, admission }),
            Err(error) => Err(PurchaseFailure {
                error,
                admission: Some(admission),
            }),
        }
    }

    /// Steps 3 to 6, once the limiter has admitted the request.
    async fn reserve_and_order(
        &self,
        item: &Item,
        user: UserId,
        order_id: Uuid,
    ) -> Result<Order, SaleError> {
        let reservation = PendingReservation {
            user,
            order: order_id,
        };
        let mut reserved = self
            .redis
            .reserve(item, user, reservation.order)
            .await
            .map_err(SaleError::OrderFailed)?;
        if reserved == Reservation::Missing {
            tracing::warn!(item.id = %item.id, "stock missing in redis, rebuilding from postgres");
            self.restore(item).await.map_err(SaleError::OrderFailed)?;
            reserved = self
                .redis
                .reserve(item, user, reservation.order)
                .await
                .map_err(SaleError::OrderFailed)?;
        }
        match reserved {
            Reservation::Reserved { remaining } => {
                if remaining == 0 {
                    self.announce(item.id, true).await;
                }
            }
            Reservation::NotStarted => return Err(SaleError::NotStarted),
            Reservation::Ended => return Err(SaleError::Ended),
            Reservation::AlreadyPurchased => return Err(SaleError::AlreadyPurchased),
            Reservation::SoldOut => {
                self.announce(item.id, true).await;
                return Err(SaleError::SoldOut);
            }
            Reservation::Missing => {
                return Err(SaleError::OrderFailed(anyhow::anyhow!(
                    "stock still missing after a rebuild"
                )))
            }
        }

        if let Err(e) = self
            .redis
            .record_success(item.id, user, reservation.order)
            .await
        {
            self.repair(item, reservation, Undo::Release).await;
            return Err(SaleError::OrderFailed(e));
        }
        if crash_point("sale::before_commit", user) {
            return Err(SaleError::OrderFailed(anyhow::anyhow!(
                "injected crash before the commit"
            )));
        }
        let order = self.commit(item, reservation).await?;
        if crash_point("sale::after_commit", user) {
            return Err(SaleError::OrderFailed(anyhow::anyhow!(
                "injected crash after the commit"
            )));
        }
        if crash_point("sale::hang_after_commit", user) {
            // The request never finishes, like one whose process died here.
            std::future::pending::<()>().await;
        }
        Ok(order)
    }

    /// Step 5 (through the committer) and, when it does not succeed, the repair of
    /// Redis.
    async fn commit(
        &self,
        item: &Item,
        reservation: PendingReservation,
    ) -> Result<Order, SaleError> {
        let PendingReservation {
            user,
            order: order_id,
        } = reservation;
        let order = NewOrder {
            id: order_id,
            user,
            item: item.id,
        };
        let timer = self.metrics.order_commit.start_timer();
        let start_by = tokio::time::Instant::now() + self.commit_timeout;
        let outcome = self.committer.commit(order, start_by).await;
        timer.observe_duration();
        match outcome {
            Ok(order) => Ok(order),
            Err(CommitError::SoldOut) => {
                self.repair(item, reservation, Undo::SoldOut).await;
                Err(SaleError::SoldOut)
            }
            Err(CommitError::AlreadyPurchased) => {
                let existing_order = postgres::order_of(&self.pool, user, item.id)
                    .await
                    .ok()
                    .flatten()
                    .map(|o| o.id);
                self.repair(item, reservation, Undo::KeepBuyer { existing_order })
                    .await;
                Err(SaleError::AlreadyPurchased)
            }
            Err(CommitError::Failed(e)) => {
                if is_pool_timeout(&e) {
                    self.metrics.commit_pool_timeouts.inc();
                }
                self.repair(item, reservation, Undo::Release).await;
                Err(SaleError::OrderFailed(e))
            }
            // The order may yet land: the reservation stays pending (with its
            // transaction id, when known) and the reconciler settles it after the
            // deadline, by when Postgres's own timeouts have ended the transaction.
            Err(CommitError::InDoubt { txid, cause }) => {
                tracing::warn!(
                    item.id = %item.id, order.id = %order_id, txid = ?txid.map(|t| t.0),
                    error = %format!("{cause:#}"),
                    "order commit in doubt: left pending for the reconciler"
                );
                if let Some(txid) = txid {
                    if let Err(e) = self.redis.note_in_doubt(item.id, reservation, txid).await {
                        tracing::warn!(error = %format!("{e:#}"), "could not record an in-doubt commit");
                    }
                }
                Err(SaleError::OrderPending(order_id))
            }
        }
    }

    /// The committer's loop (see [`committer`]): runs until the app stops, then commits
    /// what is still queued.
    pub async fn run_committer(self: Arc<Self>, queue: Queue, batching: Batching) {
        committer::run(queue, batching, |orders| {
            let sale = Arc::clone(&self);
            async move { sale.commit_batch(orders).await }
        })
        .await;
    }

    /// One batch: Postgres, then the committed orders' pending records cleared with one
    /// `ZREM` per item, beside the next batch (the orders stand without it; the
    /// reconciler clears what it could not).
    async fn commit_batch(self: Arc<Self>, orders: Vec<NewOrder>) -> Vec<committer::Outcome> {
        self.metrics.commit_batch_size.observe(orders.len() as f64);
        // Failpoint `committer::stall` (`return(<user id>)`): a batch holding that user's
        // order waits while the point is on, and the queue fills behind it.
        while orders
            .iter()
            .any(|o| crash_point("committer::stall", o.user))
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let outcomes =
            postgres::commit_orders(&self.commit_pool, &orders, self.commit_timeout).await;
        let mut settled: Vec<(ItemId, PendingReservation)> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok())
            .map(|o| {
                let reservation = PendingReservation {
                    user: o.user_id,
                    order: o.id,
                };
                (o.item_id, reservation)
            })
            .collect();
        settled.sort_by_key(|(item, _)| *item);
        if !settled.is_empty() {
            let sale = Arc::clone(&self);
            tokio::spawn(async move {
                for group in settled.chunk_by(|a, b| a.0 == b.0) {
                    let item = group[0].0;
                    let reservations: Vec<_> = group.iter().map(|(_, r)| *r).collect();
                    if let Err(e) = sale.redis.settle(item, &reservations).await {
                        tracing::warn!(item.id = %item, error = %format!("{e:#}"), "could not clear pending reservations");
                    }
                }
            });
        }
        outcomes
    }

    /// Orders waiting for the committer (read at scrape time).
    pub fn commit_queue_len(&self) -> usize {
        self.committer.queued()
    }

    /// Undoes a reservation and tells every instance when stock came back.
    async fn repair(&self, item: &Item, reservation: PendingReservation, how: Undo) {
        match self.redis.undo(item.id, reservation, how).await {
            Ok(true) => self.announce(item.id, how == Undo::SoldOut).await,
            Ok(false) => {} // already settled elsewhere
            Err(e) => tracing::error!(
                item.id = %item.id, user.id = %reservation.user, error = %format!("{e:#}"),
                "could not repair redis after a failed order; the reconciler will"
            ),
        }
    }

    /// Records a sold-out change here and publishes it to the other instances.
    async fn announce(&self, item: ItemId, sold_out: bool) {
        self.note_sold_out(item, sold_out);
        let channel = sold_out::channel(self.redis.store().prefix());
        let mut publish = ::redis::cmd("PUBLISH");
        publish.arg(channel).arg(sold_out::message(item, sold_out));
        if let Err(e) = self
            .redis
            .store()
            .call::<i64>(RedisPurpose::Other, &publish)
            .await
        {
            tracing::warn!(item.id = %item, error = %e, "could not publish a sold-out change");
        }
    }

    /// Applies a sold-out change learned from anywhere (this instance, pub/sub, the
    /// periodic check).
    pub fn note_sold_out(&self, item: ItemId, sold_out: bool) {
        if self.board.set(item, sold_out) {
            tracing::info!(item.id = %item, sold_out, "sold-out state changed");
            self.metrics.sold_out_items.set(self.board.len() as i64);
        }
    }

    /// The safety net under pub/sub: one MGET of every unended item's stock, which
    /// also feeds `seckill_stock_remaining`.
    pub async fn refresh_sold_out(&self) -> anyhow::Result<()> {
        let items = self.catalog.unended(Utc::now());
        let ids: Vec<_> = items.iter().map(|i| i.id).collect();
        let stocks = self.redis.remaining(&ids).await?;
        self.retain_item_series(&self.metrics.stock_remaining, &ids);
        for (id, stock) in ids.iter().zip(stocks) {
            if let Some(stock) = stock {
                self.note_sold_out(*id, stock <= 0);
                self.metrics
                    .stock_remaining
                    .with_label_values(&[&id.to_string()])
                    .set(stock);
            }
        }
        Ok(())
    }

    /// Exports, per item on sale, the orders in Postgres and the Redis success counter:
    /// two numbers that must agree (an alert watches them). Off the request path.
    pub async fn export_consistency(&self) -> anyhow::Result<()> {
        let items = self.catalog.unended(Utc::now());
        let ids: Vec<_> = items.iter().map(|i| i.id).collect();
        self.retain_item_series(&self.metrics.consistency_postgres_orders, &ids);
        self.retain_item_series(&self.metrics.consistency_redis_success, &ids);
        for id in ids {
            let (orders, _) = postgres::order_counts(&self.pool, id, &[]).await?;
            let success = self.redis.success_count(id).await?;
            let label = id.to_string();
            self.metrics
                .consistency_postgres_orders
                .with_label_values(&[&label])
                .set(orders);
            self.metrics
                .consistency_redis_success
                .with_label_values(&[&label])
                .set(success);
        }
        Ok(())
    }

    /// Drops the series of items no longer on sale, keeping the label set bounded.
    fn retain_item_series(&self, gauge: &prometheus::IntGaugeVec, on_sale: &[ItemId]) {
        for item in self.catalog.ended_ids(Utc::now()) {
            if !on_sale.contains(&item) {
                let _ = gauge.remove_label_values(&[&item.to_string()]);
            }
        }
    }
}

/// Whether a commit failed because no pooled connection came within the acquire timeout.
fn is_pool_timeout(error: &anyhow::Error) -> bool {
    matches!(
        error.downcast_ref::<sqlx::Error>(),
        Some(sqlx::Error::PoolTimedOut)
    )
}

/// A fault-injection point: with the `failpoints` feature a test configures `point` as
/// `return(<user id>)`, and this answers true for that user's purchase only, which then
/// fails as the point says (`sale::before_commit` / `sale::after_commit`: as if the
/// process had died, no repair, no cleanup; `sale::hang_after_commit`: the request
/// never finishes; `sale::commit_unanswered`: the COMMIT's answer is lost;
/// `committer::stall`: the committer waits before the batch holding the order). Without the feature this is a constant `false`.
#[cfg(feature = "failpoints")]
pub(crate) fn crash_point(point: &str, user: UserId) -> bool {
    fail::eval(point, |target| {
        target.as_deref() == Some(user.to_string().as_str())
    })
    .unwrap_or(false)
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn crash_point(_point: &str, _user: UserId) -> bool {
    false
}
