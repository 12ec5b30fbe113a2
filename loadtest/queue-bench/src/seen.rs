//! What the clients saw: the joins, polls and purchases of a run, each with when it was
//! sent and answered (from the run's start). Every check of a scenario reads these and
//! nothing else of the clients.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use loadtest_core::ledger::Record;

use crate::crowd::Holder;

/// A join's answer.
#[derive(Debug, Clone)]
pub struct Joined {
    pub sent: Duration,
    pub received: Duration,
    pub status: u16,
    /// The place the join answered (1 is the first); `None` until the draw.
    pub position: Option<u64>,
}

/// A poll's `state`, or what came instead of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Waiting,
    Admitted,
    SoldOut,
    Expired,
    Closed,
    /// Not a 200, or no answer.
    Failed,
}

impl State {
    pub fn parse(state: &str) -> Self {
        match state {
            "waiting" => Self::Waiting,
            "admitted" => Self::Admitted,
            "sold_out" => Self::SoldOut,
            "expired" => Self::Expired,
            "closed" => Self::Closed,
            _ => Self::Failed,
        }
    }
}

/// The user and place a pass names (its payload, read without checking the signature:
/// the server checks that when the pass is offered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassClaims {
    pub user: i64,
    pub place: u64,
    /// The pass's `exp` (Unix seconds), the last second it is valid: its place was
    /// admitted `passTtlSecs` before the end of that second (within a second).
    pub expires_at: i64,
}

/// A poll's answer.
#[derive(Debug, Clone)]
pub struct Polled {
    pub user: i64,
    pub sent: Duration,
    pub received: Duration,
    pub state: State,
    pub position: Option<u64>,
    pub ahead: Option<u64>,
    pub pass: Option<PassClaims>,
}

/// A purchase, in the load generator's ledger form, with the instance that answered it.
#[derive(Debug, Clone)]
pub struct Bought {
    pub target: usize,
    pub holder: Holder,
    pub record: Record,
}

/// Everything seen so far. Polls that say `waiting` are counted, and kept only when the
/// scenario checks them (`keep_waiting`): a crowd of bots polls hundreds of thousands
/// of times.
pub struct Seen {
    keep_waiting: bool,
    polls: AtomicU64,
    joins: Mutex<Vec<Joined>>,
    polled: Mutex<Vec<Polled>>,
    bought: Mutex<Vec<Bought>>,
}

/// What a run saw, once it is over.
pub struct Ledger {
    pub polls: u64,
    pub joins: Vec<Joined>,
    pub polled: Vec<Polled>,
    pub bought: Vec<Bought>,
}

impl Seen {
    pub fn new(keep_waiting: bool) -> Self {
        Self {
            keep_waiting,
            polls: AtomicU64::new(0),
            joins: Mutex::default(),
            polled: Mutex::default(),
            bought: Mutex::default(),
        }
    }

    pub fn joined(&self, joined: Joined) {
        push(&self.joins, joined);
    }

    pub fn polled(&self, polled: Polled) {
        self.polls.fetch_add(1, Ordering::Relaxed);
        if self.keep_waiting || polled.state != State::Waiting {
            push(&self.polled, polled);
        }
    }

    pub fn bought(&self, bought: Bought) {
        push(&self.bought, bought);
    }

    /// Polls answered or not, so far.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    pub fn take(&self) -> Ledger {
        Ledger {
            polls: self.polls(),
            joins: std::mem::take(&mut *lock(&self.joins)),
            polled: std::mem::take(&mut *lock(&self.polled)),
            bought: std::mem::take(&mut *lock(&self.bought)),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn push<T>(m: &Mutex<Vec<T>>, value: T) {
    lock(m).push(value);
}

impl Ledger {
    /// The purchases in the ledger form the store checks read.
    pub fn records(&self) -> Vec<Record> {
        self.bought.iter().map(|b| b.record.clone()).collect()
    }

    /// Each user's first poll that said `admitted`, in the order they were received.
    pub fn first_admissions(&self) -> Vec<&Polled> {
        let mut seen = std::collections::HashSet::new();
        let mut firsts: Vec<&Polled> = self
            .polled
            .iter()
            .filter(|p| p.state == State::Admitted)
            .collect();
        firsts.sort_by_key(|p| p.received);
        firsts.retain(|p| seen.insert(p.user));
        firsts
    }
}
