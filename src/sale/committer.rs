//! Group commit: purchases hand their order to a committer, which writes the orders to
//! Postgres in batches. Each thread that commits (each actix worker) has a committer of
//! its own, with Postgres sessions of its own.
//!
//! One order per transaction held the item's row lock across three round trips, so the
//! orders of one item were serial (~1 100/s). Here a committer takes whatever is queued,
//! up to `max_batch`, as soon as its previous batch has returned: at low load a batch is
//! one order and costs one statement; under a stampede the cost per order falls with the
//! batch size (see [`super::records::commit_orders`]).
//!
//! **One per thread, not one per instance.** A single committer on `main`'s runtime made
//! every order change threads twice (the hand-over and the answer), and every batch's
//! socket woke `main` (`finish_task_switch` was 21 % of the app's samples). Like the
//! Redis connections ([`crate::store::RedisStore`]), a thread's committer is started by
//! its first order, on that thread's runtime, and its sessions are opened there: an
//! order is admitted, committed and answered on one thread. The committers belong to
//! [`Committers`], not to a global: a test that starts many applications in one process
//! gets separate ones for each, and they end when it is dropped.
//!
//! A committer answers every order it takes, within its batch's bounds. An order it
//! never took (the process stops) gets an in-doubt answer, never a failure: a failure
//! would make the purchase undo its reservation, and the order might yet be committed.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::BoxFuture;
use thread_local::ThreadLocal;
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

/// One committer's queue, which its loop ([`run`]) drains, and the turn it shares with
/// the other committers of its instance.
pub struct Queue {
    jobs: mpsc::Receiver<Job>,
    /// Held while a batch is written: an instance's committers write one batch at a
    /// time, as its one committer did (see [`run`]).
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// Starts a committer's loop on its queue, on the runtime of the thread it serves: what
/// [`Committers`] runs for each thread's first order.
pub type Start = Box<dyn Fn(Queue) -> BoxFuture<'static, ()> + Send + Sync>;

/// The purchases' side: hands an order to this thread's committer and waits for its
/// answer.
pub struct Committers {
    /// Orders one committer's queue holds; a purchase that finds it full waits for room
    /// (within its start-by time).
    capacity: usize,
    start: Start,
    /// Each thread's committer, by its queue's sending end: the loop ends once this is
    /// dropped and its queue is empty. Behind a lock only because a thread's slot can
    /// outlive its runtime (a worker restarted after a panic may be given a dead
    /// thread's slot, whose committer died with the old runtime): the one place that
    /// replaces it.
    queues: ThreadLocal<Mutex<mpsc::Sender<Job>>>,
    /// The committers' turn to write a batch.
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Committers {
    /// No committer yet: each thread's is started by `start` at its first order, with a
    /// queue of `capacity` orders.
    pub fn new(capacity: usize, start: Start) -> Self {
        Self {
            capacity: capacity.max(1),
            start,
            queues: ThreadLocal::new(),
            turn: Arc::default(),
        }
    }

    /// This thread's committer's queue, the committer started if it is the first order
    /// here (or if the one here has stopped).
    fn here(&self) -> mpsc::Sender<Job> {
        let slot = self.queues.get_or(|| Mutex::new(self.started_here()));
        let mut jobs = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if jobs.is_closed() {
            *jobs = self.started_here();
        }
        jobs.clone()
    }

    /// A committer started on this thread's runtime, by its queue.
    fn started_here(&self) -> mpsc::Sender<Job> {
        let (jobs, queue) = mpsc::channel(self.capacity);
        tokio::spawn((self.start)(Queue {
            jobs: queue,
            turn: Arc::clone(&self.turn),
        }));
        jobs
    }

    /// Commits `order`, which must be started (its statement sent) by `start_by`.
    pub async fn commit(&self, order: NewOrder, start_by: Instant) -> Outcome {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            order,
            start_by,
            reply,
        };
        match tokio::time::timeout_at(start_by, self.here().send(job)).await {
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

    /// Orders queued and not yet taken into a batch, over every committer.
    pub fn queued(&self) -> usize {
        self.queues
            .iter()
            .map(|slot| {
                let jobs = slot.lock().unwrap_or_else(PoisonError::into_inner);
                jobs.max_capacity() - jobs.capacity()
            })
            .sum()
    }

    /// Committers running: one per thread that has committed and still runs.
    pub fn running(&self) -> usize {
        self.queues
            .iter()
            .filter(|slot| {
                !slot
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_closed()
            })
            .count()
    }
}

/// What a committer does with each batch it takes: one outcome per order, in order. Its
/// state (its sessions) is its own: a committer runs one batch at a time.
pub trait CommitBatch {
    /// Commits `orders` and answers one outcome per order, in order.
    fn commit_batch(&mut self, orders: Vec<NewOrder>) -> impl Future<Output = Vec<Outcome>> + Send;
}

/// A function of the batch (the unit tests' committers).
impl<F, Fut> CommitBatch for F
where
    F: FnMut(Vec<NewOrder>) -> Fut,
    Fut: Future<Output = Vec<Outcome>> + Send,
{
    fn commit_batch(&mut self, orders: Vec<NewOrder>) -> impl Future<Output = Vec<Outcome>> + Send {
        self(orders)
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

/// Takes batches of orders from `queue` and hands each to `writer`, one batch at a time,
/// until its [`Committers`] is gone and the queue is empty (what was queued is still
/// committed).
///
/// A batch is written in the instance's turn (`Queue::turn`): the committers of an
/// instance write one batch at a time. Side by side, two statements on one item's row
/// only wait for each other in Postgres, and their batches are smaller (more statements
/// per order): in `make bench` the open model's p99 at 3 000 orders/s rose from 8–13 to
/// 12–13 ms. Waiting for its turn, a committer takes what its purchases queued
/// meanwhile, so its batch grows as the one committer's did; the wake-up at its turn is
/// one hop per batch, not per order.
pub async fn run(queue: Queue, batching: Batching, mut writer: impl CommitBatch) {
    let Queue {
        jobs: mut queue,
        turn,
    } = queue;
    let max_batch = batching.max.max(1);
    let mut jobs = Vec::with_capacity(max_batch);
    let mut previous = 0;
    loop {
        if queue.recv_many(&mut jobs, max_batch).await == 0 {
            return;
        }
        let turn = turn.lock().await;
        if !batching.linger.is_zero() && previous > 1 && jobs.len() < max_batch {
            tokio::time::sleep(batching.linger).await;
        }
        while jobs.len() < max_batch {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
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
        let outcomes = writer
            .commit_batch(ready.iter().map(|j| j.order).collect())
            .await;
        drop(turn);
        debug_assert_eq!(outcomes.len(), ready.len(), "one outcome per order");
        for (job, outcome) in ready.into_iter().zip(outcomes) {
            // The purchase may have gone (its client left); the order stands either way.
            let _ = job.reply.send(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use chrono::Utc;
    use futures_util::FutureExt;
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

    /// What the batches were: their sizes, and the thread each ran on.
    #[derive(Default)]
    struct Seen {
        sizes: Mutex<Vec<usize>>,
        threads: Mutex<Vec<std::thread::ThreadId>>,
    }

    impl Seen {
        fn sizes(&self) -> Vec<usize> {
            self.sizes.lock().unwrap().clone()
        }
    }

    /// A batch function that records each batch and, when `gate` is set, takes one
    /// permit from it before answering (a batch stays "in flight" until then).
    fn recording(
        seen: Arc<Seen>,
        gate: Option<Arc<Semaphore>>,
    ) -> impl FnMut(Vec<NewOrder>) -> BoxFuture<'static, Vec<Outcome>> {
        move |orders| {
            let seen = Arc::clone(&seen);
            let gate = gate.clone();
            async move {
                seen.sizes.lock().unwrap().push(orders.len());
                seen.threads
                    .lock()
                    .unwrap()
                    .push(std::thread::current().id());
                if let Some(gate) = gate {
                    gate.acquire().await.unwrap().forget();
                }
                orders.iter().map(committed).collect()
            }
            .boxed()
        }
    }

    /// Committers whose loops record into `seen`; each loop starts only once `start`
    /// has a permit for it, and each batch waits for a permit of `gate` when set.
    fn committers(
        capacity: usize,
        batching: Batching,
        seen: &Arc<Seen>,
        start: Option<Arc<Semaphore>>,
        gate: Option<Arc<Semaphore>>,
    ) -> Arc<Committers> {
        let seen = Arc::clone(seen);
        Arc::new(Committers::new(
            capacity,
            Box::new(move |queue| {
                let writer = recording(Arc::clone(&seen), gate.clone());
                let start = start.clone();
                async move {
                    if let Some(start) = start {
                        start.acquire().await.unwrap().forget();
                    }
                    run(queue, batching, writer).await
                }
                .boxed()
            }),
        ))
    }

    async fn until(mut condition: impl FnMut() -> bool) {
        while !condition() {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_lone_order_is_a_batch_of_one_at_once() {
        let seen = Arc::new(Seen::default());
        let committers = committers(16, batching(256), &seen, None, None);
        let first = order(1);
        assert_eq!(
            committers.commit(first, later()).await.unwrap().id,
            first.id
        );
        assert_eq!(seen.sizes(), [1]);
        assert_eq!(committers.running(), 1);
    }

    #[tokio::test]
    async fn orders_queued_while_a_batch_is_in_flight_form_the_next_batch_up_to_the_size() {
        let seen = Arc::new(Seen::default());
        let gate = Arc::new(Semaphore::new(0));
        let committers = committers(64, batching(4), &seen, None, Some(Arc::clone(&gate)));

        let mut answers = tokio::task::JoinSet::new();
        let c = Arc::clone(&committers);
        answers.spawn(async move { c.commit(order(1), later()).await });
        // The first batch (one order) is in flight; ten more arrive meanwhile.
        until(|| !seen.sizes().is_empty()).await;
        for user in 2..=11 {
            let c = Arc::clone(&committers);
            answers.spawn(async move { c.commit(order(user), later()).await });
        }
        until(|| committers.queued() == 10).await;
        gate.add_permits(100);
        let mut committed = 0;
        while let Some(answer) = answers.join_next().await {
            assert!(answer.unwrap().is_ok());
            committed += 1;
        }
        assert_eq!(committed, 11);
        assert_eq!(seen.sizes(), [1, 4, 4, 2]);
    }

    #[tokio::test]
    async fn a_committer_commits_what_was_queued_before_it_ends() {
        let seen = Arc::new(Seen::default());
        let (jobs, queue) = mpsc::channel(16);
        let mut answers = Vec::new();
        for user in 1..=3 {
            let (reply, answer) = oneshot::channel();
            let job = Job {
                order: order(user),
                start_by: later(),
                reply,
            };
            jobs.send(job).await.unwrap();
            answers.push(answer);
        }
        // Its committers are gone (the application stopped); the queue holds 3.
        drop(jobs);
        let queue = Queue {
            jobs: queue,
            turn: Arc::default(),
        };
        run(queue, batching(256), recording(Arc::clone(&seen), None)).await;
        for answer in answers {
            assert!(answer.await.unwrap().is_ok());
        }
        assert_eq!(seen.sizes(), [3]);
    }

    #[tokio::test]
    async fn an_order_past_its_start_by_time_is_not_started() {
        let seen = Arc::new(Seen::default());
        let gate = Arc::new(Semaphore::new(0));
        let committers = committers(16, batching(256), &seen, None, Some(Arc::clone(&gate)));
        let c = Arc::clone(&committers);
        let first = tokio::spawn(async move { c.commit(order(1), later()).await });
        until(|| !seen.sizes().is_empty()).await;
        let c = Arc::clone(&committers);
        let soon = Instant::now() + Duration::from_millis(20);
        let late = tokio::spawn(async move { c.commit(order(2), soon).await });
        until(|| committers.queued() == 1).await;
        tokio::time::sleep_until(soon).await; // time itself is what is tested
        gate.add_permits(100);
        assert!(first.await.unwrap().is_ok());
        assert!(matches!(late.await.unwrap(), Err(CommitError::Failed(_))));
        assert_eq!(seen.sizes(), [1], "the late order never reached Postgres");
    }

    #[tokio::test(start_paused = true)]
    async fn under_load_a_lingering_batch_takes_what_arrives_meanwhile() {
        let seen = Arc::new(Seen::default());
        let start = Arc::new(Semaphore::new(0));
        let batching = Batching {
            max: 256,
            linger: Duration::from_millis(1),
        };
        let committers = committers(16, batching, &seen, Some(Arc::clone(&start)), None);
        let mut answers = tokio::task::JoinSet::new();
        // Two orders queued before the committer's loop runs: a first batch of 2 (load).
        for user in [1, 2] {
            let c = Arc::clone(&committers);
            answers.spawn(async move { c.commit(order(user), later()).await });
        }
        until(|| committers.queued() == 2).await;
        start.add_permits(1);
        until(|| seen.sizes().len() == 1).await;
        // The next batch starts with one order and lingers; another arrives meanwhile.
        let c = Arc::clone(&committers);
        answers.spawn(async move { c.commit(order(3), later()).await });
        until(|| committers.queued() == 0).await;
        let c = Arc::clone(&committers);
        answers.spawn(async move { c.commit(order(4), later()).await });
        while let Some(answer) = answers.join_next().await {
            assert!(answer.unwrap().is_ok());
        }
        assert_eq!(seen.sizes(), [2, 2]);
    }

    /// A thread with a runtime of its own, as an actix worker: commits the orders of
    /// `users` together, each answered `Ok`; then, with `hold`, waits at it twice (its
    /// runtime, and its committer, alive until the second wait). Answers the thread.
    fn worker(
        committers: &Arc<Committers>,
        users: Vec<i64>,
        hold: Option<Arc<std::sync::Barrier>>,
    ) -> std::thread::JoinHandle<std::thread::ThreadId> {
        let committers = Arc::clone(committers);
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let answers = users
                    .into_iter()
                    .map(|user| committers.commit(order(user), later()));
                for answer in futures_util::future::join_all(answers).await {
                    assert!(answer.is_ok(), "{answer:?}");
                }
            });
            if let Some(hold) = hold {
                hold.wait();
                hold.wait();
            }
            std::thread::current().id()
        })
    }

    /// Two threads, each with a runtime of its own (as actix's workers): each commits
    /// through a committer of its own, whose batches run on that thread.
    #[test]
    fn each_thread_commits_through_its_own_committer_on_its_own_thread() {
        let seen = Arc::new(Seen::default());
        let committers = committers(16, batching(256), &seen, None, None);
        let hold = Arc::new(std::sync::Barrier::new(3));
        let workers = [vec![1, 2, 3], vec![4, 5, 6]]
            .map(|users| worker(&committers, users, Some(Arc::clone(&hold))));
        // Both threads (and their committers) are alive here.
        hold.wait();
        assert_eq!(committers.running(), 2);
        hold.wait();
        let threads = workers.map(|w| w.join().unwrap());
        let ran_on = seen.threads.lock().unwrap().clone();
        assert_eq!(seen.sizes().iter().sum::<usize>(), 6);
        for thread in &threads {
            assert!(ran_on.contains(thread), "no batch ran on {thread:?}");
        }
        assert!(ran_on.iter().all(|t| threads.contains(t)), "{ran_on:?}");
    }

    /// A thread that ends takes its runtime, and its committer, with it; the next thread
    /// may be given its slot (as a worker restarted after a panic would be), and starts a
    /// committer of its own there.
    #[test]
    fn a_thread_given_a_dead_threads_slot_starts_a_committer_of_its_own() {
        let seen = Arc::new(Seen::default());
        let committers = committers(16, batching(256), &seen, None, None);
        for user in [1, 2] {
            worker(&committers, vec![user], None).join().unwrap();
        }
        assert_eq!(seen.sizes(), [1, 1]);
        assert_eq!(
            committers.running(),
            0,
            "both committers ended with their threads"
        );
    }

    /// Two threads' committers: while one writes its batch, the other waits for its
    /// turn and takes what its thread queued meanwhile into one batch.
    #[test]
    fn the_committers_of_an_instance_take_turns_and_a_waiting_one_gathers_its_batch() {
        let seen = Arc::new(Seen::default());
        let gate = Arc::new(Semaphore::new(0));
        let committers = committers(16, batching(256), &seen, None, Some(Arc::clone(&gate)));
        let first = worker(&committers, vec![1], None);
        // The first thread's batch is in flight (held by the gate) ...
        while seen.sizes().is_empty() {
            std::thread::yield_now();
        }
        // ... while three orders reach the second thread's committer, which takes them
        // (handed over in one poll, they are one take) and waits for its turn.
        let second = worker(&committers, vec![2, 3, 4], None);
        while committers.running() < 2 || committers.queued() > 0 {
            std::thread::yield_now();
        }
        // Without a turn its batch would be recorded within the same poll that took
        // the orders; give that poll time to end (this can only make a wrong committer
        // pass, never a right one fail).
        for _ in 0..10_000 {
            std::thread::yield_now();
        }
        assert_eq!(seen.sizes(), [1], "the second committer waits for its turn");
        gate.add_permits(100);
        first.join().unwrap();
        second.join().unwrap();
        assert_eq!(seen.sizes(), [1, 3]);
    }
}
