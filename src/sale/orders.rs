//! Orders after the click: an order is `pending_payment` until its shopper pays or
//! cancels it, or its deadline passes and the [`super::Sweeper`] expires it. A cancelled
//! or expired order gives its unit back exactly once, to Postgres (in the transition's
//! own transaction, see [`records::transition`] / [`records::expire_due`]) and then to
//! Redis (the give-back, guarded per order), after which Postgres marks it
//! `returned_at`. A crash between the two stores leaves the order unmarked; the next
//! sweep gives it back (a no-op if Redis already had it) and marks it. The sold-out flag
//! is lifted everywhere once a unit is back.
//!
//! [`Orders`] is what shoppers and operators ask of them: pay, cancel, a shopper's own,
//! a search, the counts by state.

use std::collections::BTreeMap;
use std::time::Duration;

use uuid::Uuid;

use super::item::ItemId;
use super::parts::SaleParts;
use super::records::{self, GiveBack, Moved, Order, OrderFilter, OrderLine, Transition};
use super::sweeper::Sweeper;
use crate::domain::UserId;
use crate::vocabulary::OrderState;

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
    /// No order by that id, or not the caller's.
    #[error("no such order")]
    NotFound,
    /// Only a `pending_payment` order can be paid or cancelled.
    #[error("the order is {}, not pending payment", .0.as_str())]
    State(OrderState),
    /// The order is paid already (a retried payment answers it again).
    #[error("the order is paid, not pending payment")]
    Paid(Box<Order>),
    /// Postgres failed; nothing changed.
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

/// Orders after the click (see the module docs): the shopper's reads and transitions; one
/// per process.
pub struct Orders {
    parts: SaleParts,
    /// A cancellation gives its unit back through the sweeper's own give-back.
    sweeper: Sweeper,
}

impl Orders {
    /// The orders over the shared parts.
    pub fn new(parts: &SaleParts) -> Self {
        Self {
            parts: parts.clone(),
            sweeper: Sweeper::new(parts),
        }
    }

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
        if let Err(e) = self.sweeper.give_back(&[released]).await {
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
        match records::transition(&self.parts.pool, id, user, transition).await? {
            Moved::Done(order) => {
                self.parts
                    .metrics
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

    /// A shopper's orders, newest first.
    pub async fn of_user(&self, user: UserId) -> anyhow::Result<Vec<Order>> {
        records::orders_of_user(&self.parts.pool, user).await
    }

    /// The order `id` of `user`, if it was committed (a retry meeting a stale claim).
    pub async fn committed(&self, id: Uuid, user: UserId) -> anyhow::Result<Option<Order>> {
        Ok(records::order_by_id(&self.parts.pool, id)
            .await?
            .filter(|order| order.user_id == user))
    }

    /// One page of the operators' search, and how many match in all.
    /// A page of orders with their items' names and amounts, and how many match.
    pub async fn search(&self, filter: &OrderFilter) -> anyhow::Result<(Vec<OrderLine>, i64)> {
        records::search_order_lines(&self.parts.pool, filter).await
    }

    /// The next `limit` orders of an export, after `cursor` (see
    /// `records::order_lines_after`).
    pub async fn lines_after(
        &self,
        filter: &OrderFilter,
        cursor: Option<(chrono::DateTime<chrono::Utc>, Uuid)>,
        limit: i64,
    ) -> anyhow::Result<Vec<OrderLine>> {
        records::order_lines_after(&self.parts.pool, filter, cursor, limit).await
    }

    /// Orders of each item by state, for the dashboard: item id → state → count.
    pub async fn states_by_item(
        &self,
        items: &[ItemId],
    ) -> anyhow::Result<BTreeMap<i64, BTreeMap<&'static str, i64>>> {
        records::states_by_item(&self.parts.pool, items).await
    }
}
