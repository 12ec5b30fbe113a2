//! Every way a purchase can end, spelled once.
//!
//! A refusal is a [`SaleError`]; its API code (and so its HTTP status,
//! `ErrorCode::status`), message and metric label are all decided here, so the HTTP layer (`ApiError::Sale`) and the
//! `seckill_sale_outcomes_total` series cannot drift apart from the domain. Store-level
//! answers (`Reservation`, `CommitError`) are mapped into it where the purchase flow
//! reads them. Clients and dashboards depend on these words: they never change.

use std::time::Duration;

use super::records::ItemRefusal;
use crate::metrics::Metrics;
use crate::tally::{Counted, Counter};
use crate::vocabulary::ErrorCode;
pub use crate::vocabulary::Outcome;
use uuid::Uuid;

/// Why a purchase did not produce an order (the limiter's refusals aside: they are the
/// limiter's own, see `PurchaseFailure`).
#[derive(Debug, thiserror::Error)]
pub enum SaleError {
    /// No item by that id on sale.
    #[error("no such item")]
    ItemNotFound,
    /// Before the sale's start.
    #[error("the sale has not started yet")]
    NotStarted,
    /// From the sale's end on, or ended by an operator.
    #[error("the sale has ended")]
    Ended,
    /// An operator paused the sale.
    #[error("the sale is paused, please try again later")]
    Paused,
    /// The user bought this item already (one unit per user).
    #[error("you already bought this item")]
    AlreadyPurchased,
    /// No unit left.
    #[error("sold out")]
    SoldOut,
    /// The item's price changed after the purchase was admitted: nothing was bought at a
    /// price the shopper was not shown. `price_cents` is the price now.
    #[error("the price has changed; check the new price and buy again")]
    PriceChanged {
        /// The price now, in cents, for the client to show.
        price_cents: i64,
    },
    /// The item sells through its waiting room (its gate in Redis is on) and the
    /// purchase offered no valid `Queue-Pass` for this user and item. `queue` is where
    /// to join. Decided by the reservation script, after the limiter: the quota is spent.
    #[error(
        "this item sells through its waiting room: join the queue at {queue} and buy with its pass"
    )]
    NotAdmitted {
        /// The room's join URL.
        queue: String,
    },
    /// The order could not be placed; Redis was repaired (or left to the reconciler).
    /// The cause is for the log, never for the client.
    #[error("the order could not be placed, please try again")]
    OrderFailed(anyhow::Error),
    /// The order's commit went unanswered and could not be settled yet: it may yet land. The reservation
    /// stays pending and the reconciler settles it either way. The client is given the
    /// order id to look for in `GET /api/orders/mine`.
    #[error("your order is being confirmed; check your orders in a few seconds")]
    OrderPending(Uuid),
    /// Shed: as many purchases as the commit path keeps up with are in flight
    /// (`overload::shedding`). Nothing was reserved.
    #[error("too many purchases are being placed right now, please retry in a moment")]
    Overloaded,
    /// The orders breaker is open: commits keep failing, so no unit is taken for an
    /// order that could not be written (`overload::breaker`). Nothing was reserved.
    #[error("orders cannot be placed right now, please retry shortly")]
    OrdersUnavailable {
        /// How long until the breaker lets a commit try again (the `Retry-After` header).
        retry_after: Duration,
    },
}

impl SaleError {
    /// `NOT_ADMITTED` for `item`, naming its queue.
    pub fn not_admitted(item: super::item::ItemId) -> Self {
        Self::NotAdmitted {
            queue: format!("/api/items/{item}/queue"),
        }
    }

    /// The stable, documented machine-readable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::ItemNotFound => ErrorCode::ItemNotFound,
            Self::NotStarted => ErrorCode::SaleNotStarted,
            Self::Ended => ErrorCode::SaleEnded,
            Self::Paused => ErrorCode::SalePaused,
            Self::AlreadyPurchased => ErrorCode::AlreadyPurchased,
            Self::SoldOut => ErrorCode::SoldOut,
            Self::PriceChanged { .. } => ErrorCode::PriceChanged,
            Self::NotAdmitted { .. } => ErrorCode::NotAdmitted,
            Self::OrderFailed(_) => ErrorCode::OrderFailed,
            Self::OrderPending(_) => ErrorCode::OrderPending,
            Self::Overloaded => ErrorCode::Overloaded,
            Self::OrdersUnavailable { .. } => ErrorCode::OrdersUnavailable,
        }
    }

    /// The `Outcome` the metrics and the dashboard count this error as.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::ItemNotFound => Outcome::NotFound,
            Self::NotStarted => Outcome::NotStarted,
            Self::Ended => Outcome::Ended,
            Self::Paused => Outcome::Paused,
            Self::AlreadyPurchased => Outcome::AlreadyPurchased,
            Self::SoldOut => Outcome::SoldOut,
            Self::PriceChanged { .. } => Outcome::PriceChanged,
            Self::NotAdmitted { .. } => Outcome::NotAdmitted,
            Self::OrderFailed(_) => Outcome::OrderFailed,
            Self::OrderPending(_) => Outcome::OrderPending,
            Self::Overloaded => Outcome::Overloaded,
            Self::OrdersUnavailable { .. } => Outcome::OrdersUnavailable,
        }
    }

    /// When a retry may do better (`Retry-After`): the refusals that took nothing and
    /// pass with time.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            // A window of the limit is 100 ms; a second lets the queue drain.
            Self::Overloaded => Some(Duration::from_secs(1)),
            Self::OrdersUnavailable { retry_after } => Some(*retry_after),
            _ => None,
        }
    }

    /// What an idempotent retry may be told: not found, sold out, already purchased, not
    /// started, ended and a changed price stand for good (buying at the new price is a
    /// new purchase, with a new key); a paused sale, a failed order and the
    /// overload refusals are worth retrying (and so is a purchase without a pass: with
    /// one it may buy); a pending order may yet land.
    pub fn replayable(&self) -> Replayable {
        match self {
            Self::Paused
            | Self::NotAdmitted { .. }
            | Self::OrderFailed(_)
            | Self::Overloaded
            | Self::OrdersUnavailable { .. } => Replayable::No,
            Self::OrderPending(_) => Replayable::Pending,
            _ => Replayable::Yes,
        }
    }
}

impl From<ItemRefusal> for SaleError {
    fn from(why: ItemRefusal) -> Self {
        match why {
            ItemRefusal::Ended => Self::Ended,
            ItemRefusal::Paused => Self::Paused,
            ItemRefusal::PriceChanged { price_cents } => Self::PriceChanged { price_cents },
        }
    }
}

/// Whether an answer may be given again to a retry of the same purchase (an
/// `Idempotency-Key`). It depends on how far the purchase got, which only the sale knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replayable {
    /// The answer stands for good: keep it for every retry.
    Yes,
    /// The order may yet land: hold the key, so that a retry is answered from the order
    /// once the commit is over.
    Pending,
    /// Worth retrying for real: free the key.
    No,
}

/// `seckill_sale_outcomes_total` and the dashboard's tally resolved per outcome once,
/// so that counting one costs no label lookup; resolving them also makes every series
/// exist at 0 from the start.
pub struct OutcomeCounters(Vec<Counter>);

impl OutcomeCounters {
    /// One counter per `Outcome`, both Prometheus's and the tally's, resolved once.
    pub fn new(metrics: &Metrics) -> Self {
        Self(
            Outcome::ALL
                .iter()
                .map(|outcome| {
                    Counter::new(
                        metrics.sale_outcomes.with_label_values(&[outcome.label()]),
                        metrics.tally.cell(Counted::Purchase(*outcome)),
                    )
                })
                .collect(),
        )
    }

    /// Counts one purchase that ended so: one atomic add each.
    pub fn count(&self, outcome: Outcome) {
        self.0[outcome as usize].inc();
    }
}
