//! Writing orders: the batch commit behind the committer, and what to do when its answer
//! never comes (settle the batch by its key, then look its orders up). Kept apart from
//! the plain queries because this is the one place where overselling is refused for good.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::commit_connections::{CommitConnections, CommitSession};
use super::{orders_by_id, Order};
use crate::domain::UserId;
use crate::sale::item::ItemId;

/// The key of one batch's statement, chosen before it is sent (a UUID v7) and written
/// by it into `order_batches`: what [`settle`] fences when the answer never comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchKey(pub Uuid);

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
    /// Nothing was written, and nothing will be: failed before the statement was sent,
    /// Postgres answered that it failed (its transaction rolled back), or the batch was
    /// settled without the order.
    #[error("order commit failed: {0:#}")]
    Failed(anyhow::Error),
    /// The statement was sent, its answer never came, and the batch could not be
    /// settled in time: the order may still land. `batch` is the batch to settle later.
    #[error("order commit outcome unknown: {cause:#}")]
    InDoubt {
        /// The batch to settle ([`settle`]), when it was sent.
        batch: Option<BatchKey>,
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

/// How long settling a batch whose answer was lost may take in the purchase (its
/// statement may still be running: the settle waits for it); past it the orders are in
/// doubt and the reconciler settles them.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(1);

/// Writes a batch of orders within `timeout`, one statement per item (side by side, on
/// the committer's own sessions: [`CommitConnections`]),
/// and answers one outcome per order, in order. Each order is placed `pending_payment`,
/// to be paid within `pay_within`.
///
/// Per item it is one statement: a multi-row insert (`UNNEST`) that skips the users who
/// already hold a live order (`ON CONFLICT (user_id, item_id) WHERE state IN
/// ('pending_payment', 'paid') DO NOTHING`, the partial unique index
/// `orders_one_live_per_user_and_item`) and one decrement of the item's stock by the
/// number inserted, in an implicit transaction: one round trip per batch, whatever its
/// size, the item's row locked for the statement only. `CHECK (remaining_stock >= 0)`
/// stays Postgres's own guard against overselling: when it refuses a batch, the batch is
/// replayed order by order to find which ones are sold out. A batch whose answer never
/// comes is settled by its key ([`settle`]) and its orders looked up before anyone is
/// told anything.
pub async fn commit_orders(
    connections: &mut CommitConnections,
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
    // Items are independent (each statement locks one item's row): their statements run
    // side by side, one session each, as many at once as the committer has sessions.
    for round in items.chunks(connections.max()) {
        let mut sessions = Vec::with_capacity(round.len());
        for &item in round {
            sessions.push((item, connections.take(deadline).await));
        }
        let opener = &*connections;
        let per_item = futures_util::future::join_all(sessions.into_iter().map(
            |(item, session)| async move {
                let (indices, batch): (Vec<usize>, Vec<NewOrder>) = orders
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| o.item == item)
                    .map(|(i, o)| (i, *o))
                    .unzip();
                match session {
                    Ok(session) => {
                        let mut session = Some(session);
                        let answers = commit_item_orders(
                            opener,
                            &mut session,
                            item,
                            &batch,
                            deadline,
                            pay_within,
                        )
                        .await;
                        (indices, answers, session)
                    }
                    Err(e) => {
                        let error = CommitError::Failed(e.into());
                        let answers = batch.iter().map(|_| Err(error.for_one())).collect();
                        (indices, answers, None)
                    }
                }
            },
        ))
        .await;
        for (indices, answers, session) in per_item {
            if let Some(session) = session {
                connections.give_back(session);
            }
            for (index, answer) in indices.into_iter().zip(answers) {
                outcomes[index] = Some(answer);
            }
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Err(CommitError::Failed(anyhow::anyhow!("not in any batch")))))
        .collect()
}

/// One item's orders: the batch, or on a stock-check refusal each order alone, on
/// `session` (left `None` when its statement went unanswered; a settle's new session
/// takes its place).
async fn commit_item_orders(
    opener: &CommitConnections,
    session: &mut Option<CommitSession>,
    item: ItemId,
    orders: &[NewOrder],
    deadline: tokio::time::Instant,
    pay_within: Duration,
) -> Vec<Result<Order, CommitError>> {
    match commit_batch(opener, session, item, orders, deadline, pay_within).await {
        Err(BatchError::StockCheck) if orders.len() > 1 => {
            let mut outcomes = Vec::with_capacity(orders.len());
            for order in orders {
                outcomes.push(
                    match commit_batch(
                        opener,
                        session,
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
            Self::InDoubt { batch, cause } => Self::InDoubt {
                batch: *batch,
                cause: anyhow::anyhow!("{cause:#}"),
            },
        }
    }
}

/// One item's orders in one statement, in an implicit transaction: one exchange with
/// Postgres (Parse/Bind/Execute/Sync, the COMMIT at the Sync).
async fn commit_batch(
    opener: &CommitConnections,
    session: &mut Option<CommitSession>,
    item: ItemId,
    orders: &[NewOrder],
    deadline: tokio::time::Instant,
    pay_within: Duration,
) -> Result<Vec<Result<Order, CommitError>>, BatchError> {
    let failed = |e: sqlx::Error| BatchError::Commit(CommitError::Failed(e.into()));
    // Opening a session (after a lost one) is part of the budget; running out of it
    // there is a pool timeout.
    let mut conn = match session.take() {
        Some(conn) => conn,
        None => opener.open(deadline).await.map_err(failed)?,
    };
    let batch = BatchKey(Uuid::now_v7());
    let ids: Vec<Uuid> = orders.iter().map(|o| o.id).collect();
    let users: Vec<i64> = orders.iter().map(|o| o.user.get()).collect();
    let prices: Vec<i64> = orders.iter().map(|o| o.price_cents).collect();
    // `item` locks the item's row first, as the decrement below would
    // (`FOR NO KEY UPDATE`: the orders' foreign-key checks still pass): an operator's
    // end, archive, pause or price edit (`item_edits`, the row locked `FOR UPDATE`) and
    // this commit take turns on it, and READ COMMITTED hands the lock's waiter the row's
    // newest version. The one cost of locking before the insert: a cancel or an expiry
    // of the same user's order of this item (order row, then item row) running beside it
    // is a deadlock Postgres breaks within a second, failing one of the two (the
    // purchase answers ORDER_FAILED, a cancel an error to retry, an expiry waits for the
    // next sweep). It needs Redis to have lost the buyer's mark, which refuses such a
    // purchase before it gets here. `state` reads the clock once the lock is held
    // (`clock_timestamp()`, not the statement's start), so an order is refused from the
    // moment an end commits; an end sets `ends_at` from the same clock after taking the
    // lock, so every order's `created_at` (its transaction's start) is before its
    // item's end. `fence` then writes the batch's key, once the lock is held, or finds
    // it settled and the statement writes nothing (see `settle`): a statement that
    // waited on the lock past its answer's deadline is settled at once.
    let write = sqlx::query!(
        r#"WITH item AS MATERIALIZED (
             SELECT ends_at, paused, archived_at, price_cents FROM items WHERE id = $3 FOR NO KEY UPDATE
           ), state AS MATERIALIZED (
             SELECT clock_timestamp() >= ends_at OR archived_at IS NOT NULL AS ended, paused, price_cents
             FROM item
           ), fence AS (
             INSERT INTO order_batches (id) SELECT $6 FROM state
             ON CONFLICT DO NOTHING RETURNING id
           ), inserted AS (
             INSERT INTO orders (id, user_id, item_id, state, pay_by, price_cents)
             SELECT o.id, o.user_id, $3, 'pending_payment', now() + $4 * interval '1 millisecond', o.price_cents
             FROM UNNEST($1::uuid[], $2::bigint[], $5::bigint[]) AS o (id, user_id, price_cents), state s
             WHERE NOT s.ended AND NOT s.paused AND o.price_cents = s.price_cents
               AND EXISTS (SELECT 1 FROM fence)
             ON CONFLICT (user_id, item_id) WHERE state IN ('pending_payment', 'paid') DO NOTHING
             RETURNING id, created_at, pay_by
           ), taken AS (
             UPDATE items SET remaining_stock = remaining_stock - (SELECT count(*) FROM inserted)
             WHERE id = $3 AND EXISTS (SELECT 1 FROM inserted)
           )
           SELECT EXISTS (SELECT 1 FROM fence) AS "fenced_in!",
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
        batch.0,
    )
    .fetch_one(conn.connection());
    let lost = match tokio::time::timeout_at(deadline, write).await {
        Ok(Ok(_)) if commit_unanswered(orders) => {
            anyhow::anyhow!("injected: the commit's answer was lost")
        }
        Ok(Ok(row)) => {
            let state = match (row.ended, row.paused, row.price_cents) {
                (Some(ended), Some(paused), Some(price_cents)) => ItemState {
                    ended,
                    paused,
                    price_cents,
                },
                // No row: no such item, so nothing was inserted (items are never deleted).
                _ => {
                    return Err(BatchError::Commit(CommitError::Failed(anyhow::anyhow!(
                        "item {item} not found at the commit"
                    ))))
                }
            };
            if !row.fenced_in {
                // Only a settle writes the key first, and only after this answer was
                // given up: never the case for an answer read.
                return Err(BatchError::Commit(CommitError::Failed(anyhow::anyhow!(
                    "batch {} was settled before it ran",
                    batch.0
                ))));
            }
            let created = row
                .ids
                .into_iter()
                .zip(row.created.into_iter().zip(row.pay_by));
            let outcomes = answered(conn.connection(), orders, created.collect(), state).await;
            *session = Some(conn);
            return Ok(outcomes);
        }
        // Postgres answered with an error: the statement, and its transaction with it,
        // did not commit (an error at the COMMIT is a rollback too). The session is
        // ready for the next statement.
        Ok(Err(e)) if rolled_back(&e) => {
            *session = Some(conn);
            return Err(match e.as_database_error().and_then(|d| d.constraint()) {
                Some(STOCK_NOT_NEGATIVE) => BatchError::StockCheck,
                _ => failed(e),
            });
        }
        Ok(Err(e)) => anyhow::Error::from(e).context("the commit's answer never came"),
        Err(_) => anyhow::anyhow!("no answer to the commit within the commit timeout"),
    };
    // The session is closed, never reused: it ends once the statement, if it ever ran,
    // has ended.
    drop(conn);
    settle_lost(opener, session, orders, batch, lost).await
}

/// Whether `error` is Postgres's own answer that the statement failed (an `ERROR`, which
/// rolls its implicit transaction back), as opposed to a lost connection or a session
/// ended (`FATAL`), which can come after a commit.
fn rolled_back(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
        .is_some_and(|d| d.severity() == sqlx::postgres::PgSeverity::Error)
}

/// The outcomes of a batch whose answer came: `created` the orders it inserted, `state`
/// the item's row as it saw it.
async fn answered(
    conn: &mut sqlx::PgConnection,
    orders: &[NewOrder],
    created: std::collections::HashMap<Uuid, (DateTime<Utc>, DateTime<Utc>)>,
    state: ItemState,
) -> Vec<Result<Order, CommitError>> {
    // A row not inserted conflicted with the user's order of this item: an earlier
    // attempt of this very order (same id: a success), or another (already purchased).
    let skipped: Vec<Uuid> = orders
        .iter()
        .map(|o| o.id)
        .filter(|id| !created.contains_key(id))
        .collect();
    let earlier = if skipped.is_empty() {
        Vec::new()
    } else {
        match orders_by_id(conn, &skipped).await {
            Ok(found) => found,
            Err(e) => {
                let cause = e.context("looking up orders the batch skipped");
                return orders
                    .iter()
                    .map(|o| match created.get(&o.id) {
                        Some(&(at, pay_by)) => Ok(o.committed_at(at, pay_by)),
                        None => Err(CommitError::InDoubt {
                            batch: None,
                            cause: anyhow::anyhow!("{cause:#}"),
                        }),
                    })
                    .collect();
            }
        }
    };
    // Not inserted and not an earlier attempt's: refused by the item's row, or else
    // the user's other order of this item.
    orders
        .iter()
        .map(|o| match created.get(&o.id) {
            Some(&(at, pay_by)) => Ok(o.committed_at(at, pay_by)),
            None => earlier.iter().find(|e| e.id == o.id).cloned().ok_or(
                match state.refusal(o.price_cents) {
                    Some(why) => CommitError::Refused(why),
                    None => CommitError::AlreadyPurchased,
                },
            ),
        })
        .collect()
}

/// A batch whose answer was lost (`cause`): settled ([`settle`]) on a new session, each
/// order is there (committed) or failed for good. When the settle cannot finish in time
/// (the statement still runs, or Postgres does not answer) every order is in doubt, with
/// the batch's key for the reconciler. The new session, once it has answered, becomes
/// `session`.
async fn settle_lost(
    opener: &CommitConnections,
    session: &mut Option<CommitSession>,
    orders: &[NewOrder],
    batch: BatchKey,
    cause: anyhow::Error,
) -> Result<Vec<Result<Order, CommitError>>, BatchError> {
    let ids: Vec<Uuid> = orders.iter().map(|o| o.id).collect();
    let settled = tokio::time::timeout(SETTLE_TIMEOUT, async {
        let mut conn = opener
            .open(tokio::time::Instant::now() + SETTLE_TIMEOUT)
            .await?;
        settle(conn.connection(), batch).await?;
        let found = orders_by_id(conn.connection(), &ids).await?;
        Ok::<_, anyhow::Error>((found, conn))
    })
    .await
    .unwrap_or_else(|_| Err(anyhow::anyhow!("the settle did not finish in time")));
    let found = match settled {
        Ok((found, conn)) => {
            *session = Some(conn);
            found
        }
        Err(e) => {
            return Err(BatchError::Commit(CommitError::InDoubt {
                batch: Some(batch),
                cause: cause.context(format!("and the batch is not settled yet: {e:#}")),
            }))
        }
    };
    // Settled: an order not there was not written (the batch rolled back, never ran, or
    // skipped it: the user's other order or the item's refusal, which the lost answer
    // would have told) and never will be.
    Ok(orders
        .iter()
        .map(|o| {
            found.iter().find(|f| f.id == o.id).cloned().ok_or_else(|| {
                CommitError::Failed(anyhow::anyhow!("{cause:#}; settled: not written"))
            })
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

/// Failpoint `sale::commit_unanswered` (`return(<user id>)`): the commit of a batch
/// holding that user's order goes through, and its answer is "lost".
fn commit_unanswered(orders: &[NewOrder]) -> bool {
    orders
        .iter()
        .any(|o| crate::sale::failpoints::crash_point("sale::commit_unanswered", o.user))
}

/// Settles batch `batch`, whose answer was lost: writes its key into `order_batches`
/// unless the batch's own statement has. Once this returns, the statement has ended or
/// will write nothing: a statement still running holds its key's row uncommitted, and
/// this insert waits for it to end; one that has not run yet finds the key taken and
/// inserts no order. Then the orders that are there are all the batch ever wrote.
///
/// The key, not the session: a session's pid is reused and, behind a pooler, not the
/// client's; and a statement still on its way (in a socket, in a pooler's queue) has no
/// session to look at yet. Idempotent: settling twice is settling once.
pub async fn settle<'c>(db: impl sqlx::PgExecutor<'c>, batch: BatchKey) -> anyhow::Result<()> {
    sqlx::query!(
        "INSERT INTO order_batches (id) VALUES ($1) ON CONFLICT DO NOTHING",
        batch.0
    )
    .execute(db)
    .await?;
    Ok(())
}

/// How long `order_batches` keeps a key: far longer than any statement can take to
/// arrive and run (`statement_timeout`, a pooler's queue), and than the reservation
/// deadline by which the reconciler settles what the purchase could not.
pub const BATCH_KEY_RETENTION: Duration = Duration::from_secs(3600);

/// Deletes the keys of `order_batches` older than [`BATCH_KEY_RETENTION`] (the keys are
/// UUID v7: their order is their time), and answers how many.
pub async fn forget_old_batches(pool: &PgPool) -> anyhow::Result<u64> {
    let cutoff = std::time::SystemTime::now()
        .checked_sub(BATCH_KEY_RETENTION)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default();
    let cutoff = Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        cutoff.as_secs(),
        cutoff.subsec_nanos(),
    ));
    Ok(
        sqlx::query!("DELETE FROM order_batches WHERE id < $1", cutoff)
            .execute(pool)
            .await?
            .rows_affected(),
    )
}
