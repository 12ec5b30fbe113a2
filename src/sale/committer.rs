//! Group commit: purchases hand their order to one committer per instance, which writes
//! the orders to Postgres in batches.
//!
//! One order per transaction held the item's row lock across three round trips, so the
//! orders of one item were serial (~1 100/s). Here a single task takes whatever is
//! queued, up to `max_batch`, as soon as the previous batch has returned: at low load a
//! batch is one order and costs one transaction, as before; under a stampede the cost
//! per order falls with the batch size (see [`super::records::commit_orders`]).
//!
//! The committer answers every order it takes, within its batch's bounds. An order it
//! never took (the process stops) gets an in-doubt answer, never a failure: a failure
//! would make the purchase undo its reservation, and the order might yet be committed.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::records::{CommitError, NewOrder, Order};

/// What became of one order.
pub type Outcome = Result<Order, CommitError>;

/// An order waiting for its batch, and where its answer goes.
pub struct Job {
    order: NewOrder,
    /// Past this, the order is not started any more: its purchase has budgeted
    /// `order_commit_timeout` for the wait in the queue (see `configuration::safety::timeouts`).
    start_by: Instant,
    reply: oneshot::Sender<Outcome>,
}

/// The purchases' side: hands an order over and waits for its answer.
#[derive(Clone)]
pub struct Committer {
    jobs: mpsc::Sender<Job>,
}

/// The committer's side: the queue [`run`] drains.
pub struct Queue(mpsc::Receiver<Job>);

impl Committer {
    /// A committer whose queue holds up to `capacity` orders; a purchase that finds it
    /// full waits for room (within its start-by time).
    pub fn new(capacity: usize) -> (Self, Queue) {
        let (jobs, queue) = mpsc::channel(capacity.max(1));
        (Self { jobs }, Queue(queue))
    }

    /// Commits `order`, which must be started (its transaction begun) by `start_by`.
    pub async fn commit(&self, order: NewOrder, start_by: Instant) -> Outcome {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            order,
            start_by,
            reply,
        };
        match tokio::time::timeout_at(start_by, self.jobs.send(job)).await {
            Ok(Ok(())) => {}
            // Never queued: nothing can be written.
            Ok(Err(_)) => {
                return Err(CommitError::Failed(anyhow::anyhow!(
                    "the committer has stopped"
                )))
            }
            Err(_) => {
                return Err(CommitError::Failed(anyhow::anyhow!(
                    "the commit queue stayed full"
                )))
            }
        }
        answer.await.unwrap_or_else(|_| {
            Err(CommitError::InDoubt {
                batch: None,
                cause: anyhow::anyhow!("the committer stopped with this order in hand"),
            })
        })
    }

    /// Orders queued and not yet taken into a batch.
    pub fn queued(&self) -> usize {
        self.jobs.max_capacity() - self.jobs.capacity()
    }
}

/// How batches are formed.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    /// Most orders in one batch.
    pub max: usize,
    /// Under load (the previous batch held more than one order), how long a batch that
    /// is not full waits for more before it starts. Zero (the default) starts it at
    /// once. A millisecond grows batches several-fold under a stampede, and with them
    /// the orders per round trip (see docs/performance.md), for that much latency.
    pub linger: std::time::Duration,
}

/// Takes batches of orders from `queue` and hands each to `commit_batch`, one batch at a
/// time, until every [`Committer`] is gone and the queue is empty (so a graceful
/// shutdown commits what was queued). `commit_batch` answers one outcome per order, in
/// order.
pub async fn run<F, Fut>(queue: Queue, batching: Batching, mut commit_batch: F)
where
    F: FnMut(Vec<NewOrder>) -> Fut,
    Fut: Future<Output = Vec<Outcome>>,
{
    let Queue(mut queue) = queue;
    let max_batch = batching.max.max(1);
    let mut jobs = Vec::with_capacity(max_batch);
    let mut previous = 0;
    loop {
        if queue.recv_many(&mut jobs, max_batch).await == 0 {
            return;
        }
        if !batching.linger.is_zero() && previous > 1 && jobs.len() < max_batch {
            tokio::time::sleep(batching.linger).await;
            while jobs.len() < max_batch {
                match queue.try_recv() {
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
        }
        previous = jobs.len();
        let now = Instant::now();
        let (late, ready): (Vec<Job>, Vec<Job>) = jobs.drain(..).partition(|j| j.start_by <= now);
        for job in late {
            let _ = job.reply.send(Err(CommitError::Failed(anyhow::anyhow!(
                "waited too long in the commit queue"
            ))));
        }
        if ready.is_empty() {
            continue;
        }
        let outcomes = commit_batch(ready.iter().map(|j| j.order).collect()).await;
        debug_assert_eq!(outcomes.len(), ready.len(), "one outcome per order");
        for (job, outcome) in ready.into_iter().zip(outcomes) {
            // The purchase may have gone (its client left); the order stands either way.
            let _ = job.reply.send(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use chrono::Utc;
    use tokio::sync::Semaphore;
    use uuid::Uuid;

    use super::*;
    use crate::domain::UserId;
    use crate::sale::item::ItemId;

    fn order(user: i64) -> NewOrder {
        NewOrder {
            id: Uuid::now_v7(),
            user: UserId::try_from(user).unwrap(),
            item: ItemId::try_from(1).unwrap(),
            price_cents: 100,
        }
    }

    fn committed(order: &NewOrder) -> Outcome {
        Ok(Order {
            id: order.id,
            user_id: order.user,
            item_id: order.item,
            created_at: Utc::now(),
            state: crate::vocabulary::OrderState::PendingPayment,
            pay_by: None,
        })
    }

    fn batching(max: usize) -> Batching {
        Batching {
            max,
            linger: Duration::ZERO,
        }
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    /// A batch function that records batch sizes and, when `gate` is set, takes one
    /// permit from it before answering (a batch stays "in flight" until then).
    fn recording(
        sizes: Arc<Mutex<Vec<usize>>>,
        gate: Option<Arc<Semaphore>>,
    ) -> impl FnMut(Vec<NewOrder>) -> std::pin::Pin<Box<dyn Future<Output = Vec<Outcome>> + Send>>
    {
        move |orders| {
            let sizes = Arc::clone(&sizes);
            let gate = gate.clone();
            Box::pin(async move {
                sizes.lock().unwrap().push(orders.len());
                if let Some(gate) = gate {
                    gate.acquire().await.unwrap().forget();
                }
                orders.iter().map(committed).collect()
            })
        }
    }

    async fn until(mut condition: impl FnMut() -> bool) {
        while !condition() {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_lone_order_is_a_batch_of_one_at_once() {
        let (committer, queue) = Committer::new(16);
        let sizes = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(run(
            queue,
            batching(256),
            recording(Arc::clone(&sizes), None),
        ));
        let first = order(1);
        assert_eq!(committer.commit(first, later()).await.unwrap().id, first.id);
        assert_eq!(*sizes.lock().unwrap(), [1]);
    }

    #[tokio::test]
    async fn orders_queued_while_a_batch_is_in_flight_form_the_next_batch_up_to_the_size() {
        let (committer, queue) = Committer::new(64);
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Semaphore::new(0));
        tokio::spawn(run(
            queue,
            batching(4),
            recording(Arc::clone(&sizes), Some(Arc::clone(&gate))),
        ));

        let mut answers = tokio::task::JoinSet::new();
        let c = committer.clone();
        answers.spawn(async move { c.commit(order(1), later()).await });
        // The first batch (one order) is in flight; ten more arrive meanwhile.
        until(|| !sizes.lock().unwrap().is_empty()).await;
        for user in 2..=11 {
            let c = committer.clone();
            answers.spawn(async move { c.commit(order(user), later()).await });
        }
        until(|| committer.queued() == 10).await;
        gate.add_permits(100);
        let mut committed = 0;
        while let Some(answer) = answers.join_next().await {
            assert!(answer.unwrap().is_ok());
            committed += 1;
        }
        assert_eq!(committed, 11);
        assert_eq!(*sizes.lock().unwrap(), [1, 4, 4, 2]);
    }

    #[tokio::test]
    async fn a_shutdown_commits_what_was_queued_before_the_committer_ends() {
        let (committer, queue) = Committer::new(16);
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let (a, b, c) = (order(1), order(2), order(3));
        let answers = futures_util::future::join_all([a, b, c].map(|o| {
            let committer = committer.clone();
            async move { committer.commit(o, later()).await }
        }));
        let answered = tokio::spawn(answers);
        until(|| committer.queued() == 3).await;
        drop(committer);
        // Only the purchases' clones of the committer are left; the queue holds 3.
        run(queue, batching(256), recording(Arc::clone(&sizes), None)).await;
        let answers = answered.await.unwrap();
        assert!(answers.iter().all(Result::is_ok));
        assert_eq!(*sizes.lock().unwrap(), [3]);
    }

    #[tokio::test]
    async fn an_order_past_its_start_by_time_is_not_started() {
        let (committer, queue) = Committer::new(16);
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Semaphore::new(0));
        tokio::spawn(run(
            queue,
            batching(256),
            recording(Arc::clone(&sizes), Some(Arc::clone(&gate))),
        ));
        let c = committer.clone();
        let first = tokio::spawn(async move { c.commit(order(1), later()).await });
        until(|| !sizes.lock().unwrap().is_empty()).await;
        let c = committer.clone();
        let soon = Instant::now() + Duration::from_millis(20);
        let late = tokio::spawn(async move { c.commit(order(2), soon).await });
        until(|| committer.queued() == 1).await;
        tokio::time::sleep_until(soon).await; // time itself is what is tested
        gate.add_permits(100);
        assert!(first.await.unwrap().is_ok());
        assert!(matches!(late.await.unwrap(), Err(CommitError::Failed(_))));
        assert_eq!(
            *sizes.lock().unwrap(),
            [1],
            "the late order never reached Postgres"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn under_load_a_lingering_batch_takes_what_arrives_meanwhile() {
        let (committer, queue) = Committer::new(16);
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let mut answers = tokio::task::JoinSet::new();
        // Two orders queued before the committer starts: a first batch of 2 (load).
        for user in [1, 2] {
            let c = committer.clone();
            answers.spawn(async move { c.commit(order(user), later()).await });
        }
        until(|| committer.queued() == 2).await;
        let batching = Batching {
            max: 256,
            linger: Duration::from_millis(1),
        };
        tokio::spawn(run(queue, batching, recording(Arc::clone(&sizes), None)));
        until(|| sizes.lock().unwrap().len() == 1).await;
        // The next batch starts with one order and lingers; another arrives meanwhile.
        let c = committer.clone();
        answers.spawn(async move { c.commit(order(3), later()).await });
        until(|| committer.queued() == 0).await;
        let c = committer.clone();
        answers.spawn(async move { c.commit(order(4), later()).await });
        while let Some(answer) = answers.join_next().await {
            assert!(answer.unwrap().is_ok());
        }
        assert_eq!(*sizes.lock().unwrap(), [2, 2]);
    }
}
