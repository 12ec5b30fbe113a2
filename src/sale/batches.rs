//! A committer's side of group commit (see [`super::committer`]): what one batch of
//! orders costs, and what is cleared in Redis once it is written.
//!
//! It holds only what a batch needs (the committer's own Postgres sessions, the
//! reservations' Redis side, the timeout), apart from the purchase flow that queues the
//! orders.

use std::sync::Arc;
use std::time::Duration;

use super::committer::{self, Batching, CommitBatch, Queue};
use super::failpoints::crash_point;
use super::item::ItemId;
use super::records::{self, CommitConnections, NewOrder};
use super::stock::{PendingReservation, Reservations};
use crate::metrics::Metrics;

/// What one batch of orders needs: the committer's sessions, the reservations' Redis
/// side, the timeout.
pub struct BatchWriter {
    /// This committer's sessions, opened on its thread: order commits only, so reads
    /// and admin work (the main pool) can never make a commit wait for a connection.
    pub(super) connections: CommitConnections,
    pub(super) reservations: Arc<Reservations>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) commit_timeout: Duration,
    /// How long a new order has to be paid.
    pub(super) pay_within: Duration,
}

impl BatchWriter {
    /// The committer's loop: runs until its [`committer::Committers`] is dropped, then
    /// commits what is still queued.
    pub async fn run(self, queue: Queue, batching: Batching) {
        committer::run(queue, batching, self).await;
    }

    /// One batch: Postgres, then the committed orders' pending records cleared with one
    /// `ZREM` per item, beside the next batch (the orders stand without it; the
    /// reconciler clears what it could not).
    async fn write(&mut self, orders: Vec<NewOrder>) -> Vec<committer::Outcome> {
        self.metrics.commit_batch_size.observe(orders.len() as f64);
        // Failpoint `committer::stall` (`return(<user id>)`): a batch holding that user's
        // order waits while the point is on, and the queue fills behind it.
        while orders
            .iter()
            .any(|o| crash_point("committer::stall", o.user))
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let outcomes = records::commit_orders(
            &mut self.connections,
            &orders,
            self.commit_timeout,
            self.pay_within,
        )
        .await;
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
            let reservations = Arc::clone(&self.reservations);
            tokio::spawn(async move {
                for group in settled.chunk_by(|a, b| a.0 == b.0) {
                    let item = group[0].0;
                    let pending: Vec<_> = group.iter().map(|(_, r)| *r).collect();
                    if let Err(e) = reservations.settle(item, &pending).await {
                        tracing::warn!(item.id = %item, error = %format!("{e:#}"), "could not clear pending reservations");
                    }
                }
            });
        }
        outcomes
    }
}

impl CommitBatch for BatchWriter {
    fn commit_batch(
        &mut self,
        orders: Vec<NewOrder>,
    ) -> impl std::future::Future<Output = Vec<committer::Outcome>> + Send {
        self.write(orders)
    }
}
