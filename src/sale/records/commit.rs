//! Writing orders: the batch commit behind the committer, and what to do when a COMMIT's
//! answer never comes (ask Postgres with `txid_status`). Kept apart from the plain
//! queries because this is the one place where overselling is refused for good.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{orders_by_id, Order};
use crate::domain::UserId;
use crate::sale::item::ItemId;

/// Postgres's id of an order's transaction, taken inside it (`txid_current()`), so that
/// a COMMIT whose answer never came can be asked about later (`txid_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxId(pub i64);

/// What Postgres says became of a transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxStatus {
    /// It committed: the order is there.
    Committed,
    /// It rolled back: the order is not there and never will be.
    Aborted,
    /// Still running: a COMMIT waiting (on a lock, a trigger, a synchronous standby).
    InProgress,
}

/// Why an order commit did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// Postgres has no unit left (`CHECK (remaining_stock >= 0)` refused it).
    #[error("sold out in Postgres")]
    SoldOut,
    /// The user already holds an order of this item.
    #[error("the user already has an order of this item")]
    AlreadyPurchased,
    /// The item's row refused the order when the commit held it locked: its sale has
    /// ended (`now() >= ends_at` on Postgres's clock), it is archived or paused, or its
    /// price is no longer the one the purchase was admitted at.
    #[error("the item refused the order: {0:?}")]
    Refused(ItemRefusal),
    /// Nothing was written, and nothing will be: failed or gave up before COMMIT was
    /// sent (the transaction is rolled back, by Postgres's idle timeout at the latest),
    /// or Postgres says the transaction aborted.
    #[error("order commit failed: {0:#}")]
    Failed(anyhow::Error),
    /// COMMIT was sent and Postgres cannot say yet what became of it: the order may
    /// still land. `txid` is the transaction to ask about, when it is known.
    #[error("order commit outcome unknown: {cause:#}")]
    InDoubt {
        /// The transaction to ask about, when its id was read before COMMIT.
        txid: Option<TxId>,
        /// Why the answer did not come.
        cause: anyhow::Error,
    },
}

/// An order to write: its id (UUID v7, so inserts append to the primary-key index),
/// its buyer and its item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewOrder {
    /// Made before the reservation (a v7 UUID), so every record of the purchase names it.
    pub id: Uuid,
    /// The buyer.
    pub user: UserId,
    /// The item, one unit.
    pub item: ItemId,
    /// The item's price when it was bought: the order's amount from then on.
    pub price_cents: i64,
}

/// Why the item's row refused an order at the commit, whatever the purchase's instance
/// believed of it: an operator's end, archive, pause or price edit reaches every instance
/// here, from its COMMIT on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemRefusal {
    /// Its sale has ended (its end reached or set by an operator), or it is archived.
    Ended,
    /// An operator paused its sale.
    Paused,
    /// The order's price is not the item's: the item's price now.
    PriceChanged {
        /// The price now, in cents.
        price_cents: i64,
    },
}

/// The item's row as the commit saw it, locked.
#[derive(Debug, Clone, Copy)]
struct ItemState {
    ended: bool,
    paused: bool,
    price_cents: i64,
}

impl ItemState {
    /// What the row says of an order at `price_cents`.
    fn refusal(&self, price_cents: i64) -> Option<ItemRefusal> {
        if self.ended {
            Some(ItemRefusal::Ended)
        } else if self.paused {
            Some(ItemRefusal::Paused)
        } else if price_cents != self.price_cents {
            Some(ItemRefusal::PriceChanged {
                price_cents: self.price_cents,
            })
        } else {
            None
        }
    }
}

/// The check that keeps an item's stock from going below zero.
const STOCK_NOT_NEGATIVE: &str = "items_remaining_stock_check";

/// How long the question "what became of this transaction?" may take: one lookup in
/// Postgres's commit log.
const TX_STATUS_TIMEOUT: Duration = Duration::from_secs(1);

/// Writes a batch of orders within `timeout`, one transaction per item (side by side),
/// and answers one outcome per order, in order. Each order is placed `pending_payment`,
/// to be paid within `pay_within`.
///
/// Per item it is one statement: a multi-row insert (`UNNEST`) that skips the users who
/// already hold a live order (`ON CONFLICT (user_id, item_id) WHERE state IN
/// ('pending_payment', 'paid') DO NOTHING`, the partial unique index
/// `orders_one_live_per_user_and_item`) and one decrement of the item's stock by the
/// number inserted. The item's
/// row is locked from that statement to the COMMIT: two round trips per batch, whatever
/// its size. `CHECK (remaining_stock >= 0)` stays Postgres's own guard against
/// overselling: when it refuses a batch, the batch is replayed order by order to find
/// which ones are sold out. A COMMIT without an answer is asked about (`txid_status`)
/// before anyone is told anything.
pub async fn commit_orders(
    pool: &PgPool,
    orders: &[NewOrder],
    timeout: Duration,
    pay_within: Duration,
) -> Vec<Result<Order, CommitError>> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut outcomes: Vec<Option<Result<Order, CommitError>>> =
        orders.iter().map(|_| None).collect();
    let mut items: Vec<ItemId> = orders.iter().map(|o| o.item).collect();
    items.sort_unstable();
    items.dedup();
    // Items are independent (each transaction locks one item's row): their
    // transactions run side by side, so a slow item does not hold the others up.
    let per_item = futures_util::future::join_all(items.into_iter().map(|item| async move {
        let (indices, batch): (Vec<usize>, Vec<NewOrder>) = orders
            .iter()
            .enumerate()
            .filter(|(_, o)| o.item == item)
            .map(|(i, o)| (i, *o))
            .unzip();
        let answers = commit_item_orders(pool, item, &batch, deadline, pay_within).await;
        (indices, answers)
    }))
    .await;
    for (indices, answers) in per_item {
        for (index, answer) in indices.into_iter().zip(answers) {
            outcomes[index] = Some(answer);
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(CommitError::Failed(anyhow::anyhow!("not in any batch")))))
        .collect()
}

/// One item's orders: the batch, or on a stock-check refusal each order alone.
async fn commit_item_orders(
    pool: &PgPool,
    item: ItemId,
    orders: &[NewOrder],
    deadline: tokio::time::Instant,
    pay_within: Duration,
) -> Vec<Result<Order, CommitError>> {
    match commit_batch(pool, item, orders, deadline, pay_within).await {
        Err(BatchError::StockCheck) if orders.len() > 1 => {
            let mut outcomes = Vec::with_capacity(orders.len());
            for order in orders {
                outcomes.push(
                    match commit_batch(
                        pool,
                        item,
                        std::slice::from_ref(order),
                        deadline,
                        pay_within,
                    )
                    .await
                    {
                        Ok(mut one) => one.remove(0),
                        Err(e) => Err(e.into()),
                    },
                );
            }
            outcomes
        }
        Ok(outcomes) => outcomes,
        Err(e) => {
            let error = CommitError::from(e);
            orders.iter().map(|_| Err(error.for_one())).collect()
        }
    }
}

/// Why a batch as a whole did not commit.
#[derive(Debug)]
enum BatchError {
    StockCheck,
    Commit(CommitError),
}

impl From<BatchError> for CommitError {
    fn from(error: BatchError) -> Self {
        match error {
            BatchError::StockCheck => CommitError::SoldOut,
            BatchError::Commit(e) => e,
        }
    }
}

impl CommitError {
    /// The same outcome for one of the batch's orders.
    fn for_one(&self) -> CommitError {
        match self {
            Self::SoldOut => Self::SoldOut,
            Self::AlreadyPurchased => Self::AlreadyPurchased,
            Self::Refused(why) => Self::Refused(*why),
            Self::Failed(e) => Self::Failed(anyhow::anyhow!("{e:#}")),
            Self::InDoubt { txid, cause } => Self::InDoubt {
                txid: *txid,
                cause: anyhow::anyhow!("{cause:#}"),
            },
        }
    }
}

/// One transaction for one item's orders: BEGIN, the statement, COMMIT.
async fn commit_batch(
    pool: &PgPool,
    item: ItemId,
    orders: &[NewOrder],
    deadline: tokio::time::Instant,
    pay_within: Duration,
) -> Result<Vec<Result<Order, CommitError>>, BatchError> {
    let failed = |e: sqlx::Error| BatchError::Commit(CommitError::Failed(e.into()));
    // Waiting for a connection is part of the budget; running out of it there is a
    // pool timeout, whatever the pool's own acquire timeout.
    let mut conn = tokio::time::timeout_at(deadline, pool.acquire())
        .await
        .unwrap_or(Err(sqlx::Error::PoolTimedOut))
        .map_err(failed)?;
    let ids: Vec<Uuid> = orders.iter().map(|o| o.id).collect();
    let users: Vec<i64> = orders.iter().map(|o| o.user.get()).collect();
    let prices: Vec<i64> = orders.iter().map(|o| o.price_cents).collect();
    let write = async {
        let mut tx = sqlx::Connection::begin(&mut *conn).await.map_err(failed)?;
        // `item` locks the item's row first, as the decrement below would (`FOR NO KEY
        // UPDATE`: the orders' foreign-key checks still pass): an operator's end,
        // archive, pause or price edit (`item_edits`, the row locked `FOR UPDATE`) and
        // this commit take turns on it, and READ COMMITTED hands the lock's waiter the
        // row's newest version. The one cost of locking before the insert: a cancel or
        // an expiry of the same user's order of this item (order row, then item row)
        // running beside it is a deadlock Postgres breaks within a second, failing one
        // of the two (the purchase answers ORDER_FAILED, a cancel an error to retry, an
        // expiry waits for the next sweep). It needs Redis to have lost the buyer's mark,
        // which refuses such a purchase before it gets here. `state`
        // reads the clock once the lock is held (`clock_timestamp()`, not the
        // transaction's start), so an order is refused from the moment an end commits;
        // an end sets `ends_at` from the same clock after taking the lock, so every
        // order's `created_at` (its transaction's start) is before its item's end.
        let row = sqlx::query!(
            r#"WITH item AS MATERIALIZED (
                 SELECT ends_at, paused, archived_at, price_cents FROM items WHERE id = $3 FOR NO KEY UPDATE
               ), state AS MATERIALIZED (
                 SELECT clock_timestamp() >= ends_at OR archived_at IS NOT NULL AS ended, paused, price_cents
                 FROM item
               ), inserted AS (
                 INSERT INTO orders (id, user_id, item_id, state, pay_by, price_cents)
                 SELECT o.id, o.user_id, $3, 'pending_payment', now() + $4 * interval '1 millisecond', o.price_cents
                 FROM UNNEST($1::uuid[], $2::bigint[], $5::bigint[]) AS o (id, user_id, price_cents), state s
                 WHERE NOT s.ended AND NOT s.paused AND o.price_cents = s.price_cents
                 ON CONFLICT (user_id, item_id) WHERE state IN ('pending_payment', 'paid') DO NOTHING
                 RETURNING id, created_at, pay_by
               ), taken AS (
                 UPDATE items SET remaining_stock = remaining_stock - (SELECT count(*) FROM inserted)
                 WHERE id = $3 AND EXISTS (SELECT 1 FROM inserted)
               )
               SELECT txid_current() AS "txid!",
                      coalesce(array_agg(id), '{}') AS "ids!: Vec<Uuid>",
                      coalesce(array_agg(created_at), '{}') AS "created!: Vec<DateTime<Utc>>",
                      coalesce(array_agg(pay_by), '{}') AS "pay_by!: Vec<DateTime<Utc>>",
                      (SELECT ended FROM state) AS "ended?",
                      (SELECT paused FROM state) AS "paused?",
                      (SELECT price_cents FROM state) AS "price_cents?"
               FROM inserted"#,
            &ids,
            &users,
            item.get(),
            pay_within.as_millis() as f64,
            &prices,
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| match e.as_database_error().and_then(|d| d.constraint()) {
            Some(STOCK_NOT_NEGATIVE) => BatchError::StockCheck,
            _ => failed(e),
        })?;
        let created: Vec<_> = row.created.into_iter().zip(row.pay_by).collect();
        // No row: no such item, so nothing was inserted (items are never deleted).
        let state = match (row.ended, row.paused, row.price_cents) {
            (Some(ended), Some(paused), Some(price_cents)) => ItemState {
                ended,
                paused,
                price_cents,
            },
            _ => {
                return Err(BatchError::Commit(CommitError::Failed(anyhow::anyhow!(
                    "item {item} not found at the commit"
                ))))
            }
        };
        Ok((tx, TxId(row.txid), row.ids, created, state))
    };
    let (tx, txid, inserted, created, state) = tokio::time::timeout_at(deadline, write)
        .await
        .map_err(|_| {
            BatchError::Commit(CommitError::Failed(anyhow::anyhow!(
                "no answer before COMMIT within the commit timeout"
            )))
        })??;
    let committed = match tokio::time::timeout_at(deadline, tx.commit()).await {
        Ok(Ok(())) if !commit_unanswered(orders) => Ok(()),
        Ok(Ok(())) => Err(anyhow::anyhow!("injected: the COMMIT's answer was lost")),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(anyhow::anyhow!(
            "no answer to COMMIT within the commit timeout"
        )),
    };
    drop(conn);
    if let Err(cause) = committed {
        let status = tokio::time::timeout(TX_STATUS_TIMEOUT, transaction_status(pool, txid))
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("txid_status did not answer in time")));
        match status {
            Ok(TxStatus::Committed) => {}
            Ok(TxStatus::Aborted) => return Err(BatchError::Commit(CommitError::Failed(cause))),
            // Still running, or Postgres cannot say: the orders may yet land.
            other => {
                let cause = match other {
                    Err(e) => cause.context(format!("and its status is unknown: {e:#}")),
                    Ok(_) => cause.context("the transaction is still in progress"),
                };
                return Err(BatchError::Commit(CommitError::InDoubt {
                    txid: Some(txid),
                    cause,
                }));
            }
        }
    }
    let created_at: std::collections::HashMap<Uuid, (DateTime<Utc>, DateTime<Utc>)> =
        inserted.into_iter().zip(created).collect();
    // A row not inserted conflicted with the user's order of this item: an earlier
    // attempt of this very order (same id: a success), or another (already purchased).
    let skipped: Vec<Uuid> = ids
        .iter()
        .filter(|id| !created_at.contains_key(id))
        .copied()
        .collect();
    let earlier = if skipped.is_empty() {
        Vec::new()
    } else {
        match orders_by_id(pool, &skipped).await {
            Ok(found) => found,
            Err(e) => {
                let cause = e.context("looking up orders the batch skipped");
                return Ok(orders
                    .iter()
                    .map(|o| match created_at.get(&o.id) {
                        Some(&(at, pay_by)) => Ok(o.committed_at(at, pay_by)),
                        None => Err(CommitError::InDoubt {
                            txid: None,
                            cause: anyhow::anyhow!("{cause:#}"),
                        }),
                    })
                    .collect());
            }
        }
    };
    // Not inserted and not an earlier attempt's: refused by the item's row, or else
    // the user's other order of this item.
    Ok(orders
        .iter()
        .map(|o| match created_at.get(&o.id) {
            Some(&(at, pay_by)) => Ok(o.committed_at(at, pay_by)),
            None => earlier.iter().find(|e| e.id == o.id).cloned().ok_or(
                match state.refusal(o.price_cents) {
                    Some(why) => CommitError::Refused(why),
                    None => CommitError::AlreadyPurchased,
                },
            ),
        })
        .collect())
}

impl NewOrder {
    fn committed_at(&self, created_at: DateTime<Utc>, pay_by: DateTime<Utc>) -> Order {
        Order {
            id: self.id,
            user_id: self.user,
            item_id: self.item,
            created_at,
            state: crate::vocabulary::OrderState::PendingPayment,
            pay_by: Some(pay_by),
        }
    }
}

/// Failpoint `sale::commit_unanswered` (`return(<user id>)`): the COMMIT of a batch
/// holding that user's order goes through, and its answer is "lost".
fn commit_unanswered(orders: &[NewOrder]) -> bool {
    orders
        .iter()
        .any(|o| crate::sale::failpoints::crash_point("sale::commit_unanswered", o.user))
}

/// What became of transaction `txid`, from any session (`txid_status`).
pub async fn transaction_status(pool: &PgPool, txid: TxId) -> anyhow::Result<TxStatus> {
    let status = sqlx::query_scalar!(r#"SELECT txid_status($1) AS "status""#, txid.0)
        .fetch_one(pool)
        .await?;
    match status.as_deref() {
        Some("committed") => Ok(TxStatus::Committed),
        Some("aborted") => Ok(TxStatus::Aborted),
        Some("in progress") => Ok(TxStatus::InProgress),
        // NULL: too old to be known (wrapped around); never the case within a deadline.
        other => anyhow::bail!("txid_status({}) answered {other:?}", txid.0),
    }
}
