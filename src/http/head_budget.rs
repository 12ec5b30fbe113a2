//! A listener's budget of connections waiting for a request head, over all its workers:
//! when a newcomer finds it full, the connection that has waited longest is closed.
//!
//! The per-address share bounds one client, not a botnet. A hundred addresses, each under
//! its share, held every place of actix's per-worker cap (`max_connections`) with heads
//! that never end; with every worker full, actix stops accepting, and everyone else waited
//! in the listen backlog until the head deadline freed a place (p99 3.4 s, docs/soak.md,
//! "Slowloris"). The connections waiting for a head (new ones, trickling ones, idle
//! keep-alive ones) have this budget, below the workers' places, so the workers always
//! have room to accept a newcomer, and the ones that give way to it are those that have
//! waited longest: an honest client sends its head as soon as it has connected, a
//! slowloris's head never arrives. A connection serving a request is not waiting, and is
//! never closed for the budget.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use futures_util::task::AtomicWaker;

use crate::metrics::Metrics;
use crate::vocabulary::ConnectionCut;

/// The connections of one listener that are waiting for a head, oldest first.
pub struct HeadBudget {
    budget: usize,
    waiting: Mutex<Waiting>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct Waiting {
    /// The next wait's place: places only grow, so the first key is the oldest wait.
    next: u64,
    by_age: BTreeMap<u64, Arc<Cut>>,
}

/// Set when the budget closes a waiting connection. The connection runs on its own
/// worker, perhaps another than the newcomer's: its stream is woken to read the cut.
#[derive(Default)]
struct Cut {
    done: AtomicBool,
    waker: AtomicWaker,
}

/// One connection's wait for a head; leaving (dropping it) gives its place back.
pub struct Wait {
    budget: Arc<HeadBudget>,
    place: u64,
    cut: Arc<Cut>,
}

impl HeadBudget {
    /// At most `budget` (at least 1) connections wait for a head at once.
    pub fn new(budget: usize, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            budget: budget.max(1),
            waiting: Mutex::new(Waiting::default()),
            metrics,
        })
    }

    /// A connection starts waiting for a head; if that makes one too many, the oldest
    /// wait is cut (never this one: it is the newest).
    pub fn wait(self: &Arc<Self>) -> Wait {
        let cut = Arc::new(Cut::default());
        let (place, oldest) = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            let place = waiting.next;
            waiting.next += 1;
            waiting.by_age.insert(place, Arc::clone(&cut));
            let oldest = if waiting.by_age.len() > self.budget {
                waiting.by_age.pop_first().map(|(_, cut)| cut)
            } else {
                None
            };
            (place, oldest)
        };
        if let Some(oldest) = oldest {
            oldest.done.store(true, Ordering::Release);
            oldest.waker.wake();
            self.metrics
                .connections_cut
                .with_label_values(&[ConnectionCut::HeadBudget.label()])
                .inc();
        }
        Wait {
            budget: Arc::clone(self),
            place,
            cut,
        }
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        let waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        waiting.by_age.len()
    }
}

impl Wait {
    /// Whether the budget has cut this wait; if not, `waker` is woken when it does.
    pub fn is_cut(&self, waker: &Waker) -> bool {
        self.wake_on_cut(waker);
        self.cut.done.load(Ordering::Acquire)
    }

    /// `waker` is woken when the budget cuts this wait.
    pub fn wake_on_cut(&self, waker: &Waker) {
        self.cut.waker.register(waker);
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        let mut waiting = self
            .budget
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        waiting.by_age.remove(&self.place);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newcomer_past_the_budget_cuts_the_oldest_wait_and_a_head_gives_its_place_back() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let budget = HeadBudget::new(2, Arc::clone(&metrics));
        let waker = futures_util::task::noop_waker();
        let first = budget.wait();
        let second = budget.wait();
        assert!(!first.is_cut(&waker) && !second.is_cut(&waker));
        let third = budget.wait();
        assert!(first.is_cut(&waker), "the oldest gives way");
        assert!(!second.is_cut(&waker) && !third.is_cut(&waker));
        assert_eq!(budget.waiting(), 2);
        // The second's head arrives: it stops waiting, and the next newcomer fits.
        drop(second);
        let fourth = budget.wait();
        assert!(!third.is_cut(&waker) && !fourth.is_cut(&waker));
        drop(first);
        assert_eq!(budget.waiting(), 2, "a cut wait left when it was cut");
        let cuts = metrics
            .connections_cut
            .with_label_values(&[ConnectionCut::HeadBudget.label()])
            .get();
        assert_eq!(cuts, 1);
    }
}
