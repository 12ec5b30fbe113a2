//! What this instance counted for the dashboard: the limiter's decisions and refusals
//! by policy and rule, purchases by outcome; and the live stock it last read of each
//! item on sale. The stats flush (`crate::stats`) reads the
//! running totals once a second and adds their growth to the shared per-second buckets
//! in Redis; nothing here knows Redis or Prometheus.
//!
//! The counters that record an event resolve their cell once (when a policy is
//! installed, when the sale starts), so counting costs one atomic add, beside the
//! Prometheus counter the same event increments for scrapes ([`Counter`] does both).
//!
//! For the history's stream (`crate::stats::record`) it also counts per item
//! ([`per_item`]), keeps a sample of refusals and each minute's heavy hitters
//! ([`refusals`], over the Space-Saving summaries of [`sketch`]).

pub mod per_item;
pub mod refusals;
pub mod sketch;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::vocabulary::{Decision, Outcome};

/// What a cell counts. [`Tally::totals`] reads the cells in this order, local refusals
/// before decisions: a local refusal is counted as a rejection first, so a snapshot
/// never holds more of them than rejections.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Counted {
    /// A refusal answered by the denial cache, without a Redis call (also counted as a
    /// [`Decision::Reject`]).
    LocalRefusal {
        /// The policy refusing.
        policy: String,
        /// The rule that refused.
        rule: String,
    },
    /// A limiter rule's decision.
    Decision {
        /// The policy deciding.
        policy: String,
        /// The rule deciding.
        rule: String,
        /// Admitted or refused.
        decision: Decision,
    },
    /// An admission that left a rule above 80 % of its quota used.
    NearLimit {
        /// The policy.
        policy: String,
        /// The rule near its quota.
        rule: String,
    },
    /// A request a shadow rule would have refused.
    ShadowRefusal {
        /// The policy.
        policy: String,
        /// The shadow rule.
        rule: String,
    },
    /// A request let through because the limiter could not ask Redis.
    FailOpen {
        /// The policy whose fail mode let it through.
        policy: String,
    },
    /// A request an operator's block refused (403 `BLOCKED`), before its policy decided.
    Blocked {
        /// The policy that would have decided it.
        policy: String,
    },
    /// A purchase that ended so.
    Purchase(Outcome),
}

/// One running total.
#[derive(Debug, Clone, Default)]
pub struct Cell(Arc<AtomicU64>);

impl Cell {
    /// Counts one event: a relaxed add, read by the flush once a second.
    pub fn add(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// A Prometheus series and the tally cell of the same event, counted together: the
/// scrape and the dashboard can never disagree on what was counted.
#[derive(Clone)]
pub struct Counter {
    metric: prometheus::IntCounter,
    cell: Cell,
}

impl Counter {
    /// Counts `metric` and `cell` together, from now on.
    pub fn new(metric: prometheus::IntCounter, cell: Cell) -> Self {
        Self { metric, cell }
    }

    /// Counts one event in both.
    pub fn inc(&self) {
        self.metric.inc();
        self.cell.add();
    }
}

/// Every cell of this instance, by what it counts, and the stock levels.
#[derive(Debug, Default)]
pub struct Tally {
    cells: Mutex<BTreeMap<Counted, Cell>>,
    /// Item id → its live stock as this instance last read it (every second).
    stock: Mutex<BTreeMap<i64, i64>>,
    /// Per item: the purchases' outcomes and the waiting room's counts.
    pub items: per_item::ItemTally,
    /// The refusal samples and the minute's heavy hitters.
    pub refusals: refusals::Refusals,
}

impl Tally {
    /// The cell counting `what` (the same one for every caller).
    pub fn cell(&self, what: Counted) -> Cell {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells.entry(what).or_default().clone()
    }

    /// The stock of every item on sale as just read; items no longer on sale are dropped.
    pub fn set_stock(&self, levels: impl IntoIterator<Item = (i64, i64)>) {
        let mut stock = self.stock.lock().unwrap_or_else(|e| e.into_inner());
        *stock = levels.into_iter().collect();
    }

    /// The stock levels as last set.
    pub fn stock(&self) -> Vec<(i64, i64)> {
        let stock = self.stock.lock().unwrap_or_else(|e| e.into_inner());
        stock.iter().map(|(item, level)| (*item, *level)).collect()
    }

    /// Every running total, by what it counts.
    pub fn totals(&self) -> Vec<(Counted, u64)> {
        let cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        cells
            .iter()
            .map(|(what, cell)| (what.clone(), cell.0.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_of_the_same_thing_add_up_in_one_total() {
        let tally = Tally::default();
        let created = Counted::Purchase(Outcome::Created);
        let (one, two) = (tally.cell(created.clone()), tally.cell(created.clone()));
        one.add();
        two.add();
        tally.cell(Counted::FailOpen { policy: "p".into() }).add();
        let totals = tally.totals();
        assert!(totals.contains(&(created, 2)));
        assert!(totals.contains(&(Counted::FailOpen { policy: "p".into() }, 1)));
    }
}
