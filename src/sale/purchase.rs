//! The purchase flow, the steps of the [module docs](super): the only code on the
//! request path of `POST /seckill` below the HTTP layer. [`Purchases`] holds what a
//! purchase needs: the shared parts, the limiter, the reservation scripts and the
//! committers (one per worker thread, each with its own Postgres sessions).
//!
//! The reservation, the success pipeline and the commit each run in a `debug` span with
//! the item and the step's outcome, so a slow or failing step can be told apart without
//! logging anything per refused request. With `debug` off the spans cost a level check.

use std::future::Future;
use std::sync::Arc;

use chrono::Utc;
use tracing::{field, Instrument, Span};
use uuid::Uuid;

use sqlx::postgres::PgConnectOptions;

use super::batches::BatchWriter;
use super::committer::{Batching, Committers};
use super::error::OutcomeCounters;
use super::failpoints::crash_point;
use super::item::{Item, ItemId, SalePhase};
use super::overload::{Admitted, Overload};
use super::parts::SaleParts;
use super::records::{self, CommitConnections, CommitError, CommitSessionCount, NewOrder, Order};
use super::stock::{
    limiter_partition, PendingReservation, Reservation, ReservationOptions, Reservations, Undo,
};
use super::{Outcome, Replayable, SaleError};
use crate::configuration::policies::SECKILL_POLICY;
use crate::domain::UserId;
use crate::limiter::{Admission, Caller, Limiter, Rejection, Scope};

/// A successful purchase and the limiter's admission (for its headers).
pub struct Purchase {
    /// The committed order.
    pub order: Order,
    /// The limiter's admission, for the `RateLimit` headers.
    pub admission: Admission,
}

/// A purchase that made no order.
#[derive(Debug)]
pub enum PurchaseFailure {
    /// The limiter refused: its own answer, with its own headers.
    Limited(Rejection),
    /// Refused after the limiter admitted the request. The answer still carries the
    /// quota headers, so a client (and the load generator's checker) can tell "the
    /// limiter let me through, the stock did not" from "refused before the limiter".
    Refused {
        /// Why the sale refused.
        error: SaleError,
        /// The limiter's admission before it, for the headers.
        admission: Admission,
    },
}

impl PurchaseFailure {
    /// The `Outcome` the metrics and the dashboard count this failure as.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Limited(Rejection::Refused(_)) => Outcome::RateLimited,
            Self::Limited(_) => Outcome::LimiterUnavailable,
            Self::Refused { error, .. } => error.outcome(),
        }
    }

    /// A limiter refusal is always worth retrying; the sale's own answers say.
    pub fn replayable(&self) -> Replayable {
        match self {
            Self::Limited(_) => Replayable::No,
            Self::Refused { error, .. } => error.replayable(),
        }
    }
}

/// What a purchase needs besides the shared parts (settings `order_commit_timeout_ms`,
/// `payment_deadline_secs`, `reservation_deadline_ms`, `reservation_replica_wait_ms`).
pub struct PurchaseOptions {
    /// How the committers write (group commit): their sessions and their batches.
    pub commit: CommitOptions,
    /// The limiter that decides each purchase first.
    pub limiter: Arc<Limiter>,
    /// How reservations wait and how long they stay pending.
    pub reservations: ReservationOptions,
    /// Longest a purchase waits for the committer to start its order, and longest a
    /// batch may take before its outcome counts as unknown.
    pub commit_timeout: std::time::Duration,
    /// How long a new order has to be paid.
    pub pay_within: std::time::Duration,
    /// The orders breaker and load shedding, between the limiter and the reservation.
    pub overload: Overload,
}

/// How the committers write (settings `database_commit_connections`,
/// `commit_batch_max`, `commit_linger_ms`).
pub struct CommitOptions {
    /// How a committer opens its Postgres sessions. Order commits only: reads and admin
    /// work use the parts' pool and can never make a commit wait for a connection.
    pub connect: PgConnectOptions,
    /// Sessions of each committer: the instance's commit connections shared out over
    /// its worker threads.
    pub sessions_per_committer: usize,
    /// How a committer forms its batches.
    pub batching: Batching,
}

/// The purchase flow: limiter, overload checks, reservation, order commit, and the undo of
/// a reservation whose order was not made. One per process.
pub struct Purchases {
    parts: SaleParts,
    committers: Committers,
    /// The committers' sessions, for `/metrics`.
    commit_sessions: Arc<CommitSessionCount>,
    limiter: Arc<Limiter>,
    reservations: Arc<Reservations>,
    outcomes: OutcomeCounters,
    commit_timeout: std::time::Duration,
    overload: Overload,
}

impl Purchases {
    /// The flow over the shared parts, with `options`.
    pub fn new(parts: &SaleParts, options: PurchaseOptions) -> Self {
        let reservations = Arc::new(Reservations::new(parts.redis.clone(), options.reservations));
        let commit_sessions = Arc::new(CommitSessionCount::default());
        let committers = {
            let CommitOptions {
                connect,
                sessions_per_committer,
                batching,
            } = options.commit;
            let (reservations, sessions) =
                (Arc::clone(&reservations), Arc::clone(&commit_sessions));
            let metrics = Arc::clone(&parts.metrics);
            let (commit_timeout, pay_within) = (options.commit_timeout, options.pay_within);
            // Room for two batches: more waiting than that would outlast the commit timeout.
            Committers::new(
                2 * batching.max,
                Box::new(move |queue| {
                    let writer = BatchWriter {
                        connections: CommitConnections::new(
                            connect.clone(),
                            sessions_per_committer,
                            Arc::clone(&sessions),
                        ),
                        reservations: Arc::clone(&reservations),
                        metrics: Arc::clone(&metrics),
                        commit_timeout,
                        pay_within,
                    };
                    Box::pin(writer.run(queue, batching))
                }),
            )
        };
        Self {
            reservations,
            outcomes: OutcomeCounters::new(&parts.metrics),
            parts: parts.clone(),
            committers,
            commit_sessions,
            limiter: options.limiter,
            commit_timeout: options.commit_timeout,
            overload: options.overload,
        }
    }

    /// The orders breaker and the shedder (readiness, metrics).
    pub fn overload(&self) -> &Overload {
        &self.overload
    }

    /// The committers' Postgres sessions, open and idle (read at scrape time).
    pub fn commit_sessions(&self) -> &CommitSessionCount {
        &self.commit_sessions
    }

    /// Orders waiting for a committer (read at scrape time).
    pub fn commit_queue_len(&self) -> usize {
        self.committers.queued()
    }

    /// Step 1: the answers that need no Redis call and no quota. A refusal here is
    /// counted as the purchase's outcome.
    pub fn precheck(&self, item_id: ItemId) -> Result<Arc<Item>, SaleError> {
        let checked = self.check_open(item_id);
        if let Err(error) = &checked {
            self.outcomes.count(error.outcome());
            // Per item only for an item the catalog knows: the id is the client's.
            if !matches!(error, SaleError::ItemNotFound) {
                let items = &self.parts.metrics.tally.items;
                items.count(item_id.get(), |cells| cells.outcome(error.outcome()));
            }
        }
        checked
    }

    fn check_open(&self, item_id: ItemId) -> Result<Arc<Item>, SaleError> {
        let item = self
            .parts
            .catalog
            .get(item_id)
            .ok_or(SaleError::ItemNotFound)?;
        match item.phase(Utc::now()) {
            SalePhase::NotStarted => return Err(SaleError::NotStarted),
            SalePhase::Ended => return Err(SaleError::Ended),
            SalePhase::Open => {}
        }
        if item.paused {
            return Err(SaleError::Paused);
        }
        if self.parts.sold_out.is_sold_out(item.id) {
            return Err(SaleError::SoldOut);
        }
        Ok(item)
    }

    /// Steps 2 to 6 for an item that passed [`Self::precheck`]: the limiter, then the
    /// reservation and the order `order_id`. `pass` is the place of the valid queue pass
    /// the caller offered, if any (checked in process, see
    /// `room::WaitingRoom::check_pass`): the reservation script decides, with the item's
    /// room gate, whether one was needed, and spends it; nothing before it does.
    pub async fn purchase(
        &self,
        item: &Item,
        user: UserId,
        order_id: Uuid,
        caller: &Caller<'_>,
        pass: Option<u64>,
    ) -> Result<Purchase, PurchaseFailure> {
        // The item is what a `per_item` policy counts under: its limiter keys then
        // share the slot of the item's own keys (see `limiter::keys`).
        let caller = caller.in_partition(limiter_partition(item.id));
        // With `per_item` the policy's keys share the item's slot, so the reservation
        // runs in the limiter's own call after an admission: one round trip, not two.
        // The overload guards come before the reservation, so they are asked before
        // that call, and a refusal makes it the limiter's alone.
        let per_item = self
            .limiter
            .policy(SECKILL_POLICY)
            .is_some_and(|policy| policy.scope == Scope::PerItem);
        let mut guards = per_item.then(|| self.overload.admit(tokio::time::Instant::now()));
        let then = guards.as_ref().and_then(|admitted| {
            admitted.as_ref().ok().map(|_| {
                self.reservations
                    .reserve_after_limit(item, user, order_id, pass)
            })
        });
        let result = async {
            let (admission, reserved) = self
                .limiter
                .check_then(SECKILL_POLICY, None, &caller, then.as_ref())
                .await
                .map_err(PurchaseFailure::Limited)?;
            let admitted = guards
                .take()
                .unwrap_or_else(|| self.overload.admit(tokio::time::Instant::now()));
            let admitted = match admitted {
                Ok(admitted) => admitted,
                Err(error) => return Err(PurchaseFailure::Refused { error, admission }),
            };
            // Boxed: only an admitted purchase needs the reservation's and the order's
            // futures; a refused one then carries (and copies) just the limiter's.
            let order =
                Box::pin(self.reserve_and_order(item, user, order_id, pass, reserved, admitted));
            match order.await {
                Ok(order) => Ok(Purchase { order, admission }),
                Err(error) => Err(PurchaseFailure::Refused { error, admission }),
            }
        }
        .await;
        let outcome = match &result {
            Ok(_) => Outcome::Created,
            Err(failure) => failure.outcome(),
        };
        self.outcomes.count(outcome);
        let items = &self.parts.metrics.tally.items;
        items.count(item.id.get(), |cells| match &result {
            Err(PurchaseFailure::Limited(Rejection::Refused(refusal))) => {
                cells.rejected(refusal.dimension())
            }
            _ => cells.outcome(outcome),
        });
        result
    }

    /// An idempotent replay answered a purchase without running it.
    pub fn record_replay(&self) {
        self.outcomes.count(Outcome::IdempotentReplay);
    }

    /// Steps 3 to 6, once the limiter and the overload guards have let the request
    /// through; `admitted` is held until the purchase ends.
    async fn reserve_and_order(
        &self,
        item: &Item,
        user: UserId,
        order_id: Uuid,
        pass: Option<u64>,
        reserved: Option<redis::Value>,
        admitted: Admitted<'_>,
    ) -> Result<Order, SaleError> {
        let reservation = PendingReservation {
            user,
            order: order_id,
        };
        let reservation_span =
            tracing::debug_span!("reservation", item.id = %item.id, outcome = field::Empty);
        step(
            reservation_span,
            "reserved",
            self.reserve(item, reservation, pass, reserved),
        )
        .await?;
        // Boxed: the steps of a purchase that got a unit (pipeline, commit, undo) make
        // a future of several kB, and every refused purchase would otherwise carry it
        // and have it copied whenever its future moves.
        Box::pin(self.record_and_commit(item, reservation, admitted)).await
    }

    /// Steps 4 to 6, for a reserved unit.
    async fn record_and_commit(
        &self,
        item: &Item,
        reservation: PendingReservation,
        mut admitted: Admitted<'_>,
    ) -> Result<Order, SaleError> {
        let PendingReservation {
            user,
            order: order_id,
        } = reservation;
        let pipeline_span =
            tracing::debug_span!("pipeline", item.id = %item.id, outcome = field::Empty);
        let pipeline = async {
            let recorded = self
                .reservations
                .record_success(item.id, user, order_id)
                .await;
            if let Err(e) = recorded {
                self.undo(item, reservation, Undo::Whole).await;
                return Err(SaleError::OrderFailed(e));
            }
            Ok(())
        };
        step(pipeline_span, "recorded", pipeline).await?;
        if crash_point("sale::before_commit", user) {
            return Err(SaleError::OrderFailed(anyhow::anyhow!(
                "injected crash before the commit"
            )));
        }
        let commit_span =
            tracing::debug_span!("commit", item.id = %item.id, outcome = field::Empty);
        let order = step(
            commit_span,
            "committed",
            self.commit(item, reservation, &mut admitted),
        )
        .await?;
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

    /// Step 3: the reservation script, run again after a rebuild when Redis lost the
    /// item's stock. Its answers become the purchase's here, and only here.
    /// `in_limiter_call` is the reservation's reply when it ran in the limiter's call.
    async fn reserve(
        &self,
        item: &Item,
        reservation: PendingReservation,
        pass: Option<u64>,
        mut in_limiter_call: Option<redis::Value>,
    ) -> Result<(), SaleError> {
        let PendingReservation { user, order } = reservation;
        // At most twice: again after a rebuild when Redis had lost the item's stock.
        let mut rebuilt = false;
        let reserved = loop {
            let reserved = match in_limiter_call.take() {
                Some(reply) => self.reservations.reserved_after_limit(item, &reply).await,
                None => self.reservations.reserve(item, user, order, pass).await,
            }
            .map_err(SaleError::OrderFailed)?;
            if reserved != Reservation::Missing || rebuilt {
                break reserved;
            }
            tracing::warn!(item.id = %item.id, "stock missing in redis, rebuilding from postgres");
            // Boxed, as the rebuild's Postgres reads are large futures and rare.
            Box::pin(self.parts.rebuild(item))
                .await
                .map_err(SaleError::OrderFailed)?;
            rebuilt = true;
        };
        let answer = match reserved {
            Reservation::Reserved { .. } => Ok(()),
            Reservation::NotStarted => Err(SaleError::NotStarted),
            Reservation::Ended => Err(SaleError::Ended),
            Reservation::AlreadyPurchased => Err(SaleError::AlreadyPurchased),
            Reservation::SoldOut => Err(SaleError::SoldOut),
            Reservation::NotAdmitted => Err(SaleError::not_admitted(item.id)),
            Reservation::Missing => Err(SaleError::OrderFailed(anyhow::anyhow!(
                "stock still missing after a rebuild"
            ))),
        };
        // The last unit taken, or none left: every instance hears of it (boxed: rare,
        // and a refusal's future should not carry it).
        if matches!(
            reserved,
            Reservation::Reserved { remaining: 0 } | Reservation::SoldOut
        ) {
            Box::pin(self.parts.sold_out.announce(item.id, true)).await;
        }
        answer
    }

    /// Step 5 (through the committer) and, when it does not succeed, the reservation's
    /// undo in Redis. The committer's answers become the purchase's here, and only here;
    /// the overload guards hear whether Postgres answered, and how long it took.
    async fn commit(
        &self,
        item: &Item,
        reservation: PendingReservation,
        admitted: &mut Admitted<'_>,
    ) -> Result<Order, SaleError> {
        let PendingReservation {
            user,
            order: order_id,
        } = reservation;
        let order = NewOrder {
            id: order_id,
            user,
            item: item.id,
            price_cents: item.price_cents,
        };
        let timer = self.parts.metrics.order_commit.start_timer();
        let start_by = tokio::time::Instant::now() + self.commit_timeout;
        let outcome = self.committers.commit(order, start_by).await;
        timer.observe_duration();
        let healthy = !matches!(
            outcome,
            Err(CommitError::Failed(_) | CommitError::InDoubt { .. })
        );
        admitted.commit_answered(healthy, tokio::time::Instant::now());
        match outcome {
            Ok(order) => Ok(order),
            Err(CommitError::SoldOut) => {
                self.undo(item, reservation, Undo::SoldOut).await;
                Err(SaleError::SoldOut)
            }
            // The item's row refused it (an operator's end, archive, pause or price edit
            // this instance had not heard of yet): no order, the unit back.
            Err(CommitError::Refused(why)) => {
                self.undo(item, reservation, Undo::Whole).await;
                Err(SaleError::from(why))
            }
            Err(CommitError::AlreadyPurchased) => {
                let existing_order = records::order_of(&self.parts.pool, user, item.id)
                    .await
                    .ok()
                    .flatten()
                    .map(|o| o.id);
                self.undo(item, reservation, Undo::KeepBuyer { existing_order })
                    .await;
                Err(SaleError::AlreadyPurchased)
            }
            Err(CommitError::Failed(e)) => {
                if is_pool_timeout(&e) {
                    self.parts.metrics.commit_pool_timeouts.inc();
                }
                self.undo(item, reservation, Undo::Whole).await;
                Err(SaleError::OrderFailed(e))
            }
            // The order may yet land: the reservation stays pending (with its batch's
            // key, when known) and the reconciler settles it after the deadline.
            Err(CommitError::InDoubt { batch, cause }) => {
                tracing::warn!(
                    item.id = %item.id, order.id = %order_id, batch = ?batch.map(|b| b.0),
                    error = %format!("{cause:#}"),
                    "order commit in doubt: left pending for the reconciler"
                );
                if let Some(batch) = batch {
                    if let Err(e) = self
                        .reservations
                        .note_in_doubt(item.id, reservation, batch)
                        .await
                    {
                        tracing::warn!(error = %format!("{e:#}"), "could not record an in-doubt commit");
                    }
                }
                Err(SaleError::OrderPending(order_id))
            }
        }
    }

    /// Undoes a reservation and tells every instance when stock came back.
    async fn undo(&self, item: &Item, reservation: PendingReservation, how: Undo) {
        match self.reservations.undo(item.id, reservation, how).await {
            Ok(true) => {
                self.parts
                    .sold_out
                    .announce(item.id, how == Undo::SoldOut)
                    .await
            }
            Ok(false) => {} // already settled elsewhere
            Err(e) => tracing::error!(
                item.id = %item.id, user.id = %reservation.user, error = %format!("{e:#}"),
                "could not undo a reservation after a failed order; the reconciler will"
            ),
        }
    }
}

/// Runs one step of a purchase in `span`, and records the step's outcome in it: `done`,
/// or the refusal's metric label.
async fn step<T>(
    span: Span,
    done: &'static str,
    work: impl Future<Output = Result<T, SaleError>>,
) -> Result<T, SaleError> {
    let result = work.instrument(span.clone()).await;
    let outcome = match &result {
        Ok(_) => done,
        Err(error) => error.outcome().label(),
    };
    span.record("outcome", outcome);
    result
}

/// Whether a commit failed because no pooled connection came within the acquire timeout.
fn is_pool_timeout(error: &anyhow::Error) -> bool {
    matches!(
        error.downcast_ref::<sqlx::Error>(),
        Some(sqlx::Error::PoolTimedOut)
    )
}
