//! Per item, what this instance counted for the history: the purchases' outcomes (a
//! limiter refusal by the rule that refused) and the waiting room's joins, admissions,
//! abandons and waits.
//!
//! The request path takes no lock: the cells of every item live in one map swapped
//! whole (`ArcSwap`) when an item is first counted, so counting is a lock-free load, a
//! lookup and a relaxed add. Only items the catalog knows are counted (the callers'
//! rule), so the map is as bounded as the catalog; its cells live with the process
//! (~0.4 kB an item).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;

use crate::vocabulary::Outcome;

/// The upper bounds of the room's wait buckets, in seconds: an admission after a wait of
/// `w` counts in the first bucket whose bound is at least `w`, or in the last (over an
/// hour). Here, below every layer that counts a wait; the record re-exports it.
pub const WAIT_BUCKETS_SECS: [u64; 12] = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1_800, 3_600];

/// Refusing rules told apart per item; a refusal by a further one counts as plain
/// `rate_limited`.
const REFUSING_RULES: usize = 8;

const OUTCOMES: usize = Outcome::ALL.len();

/// What one item's running total counts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ItemField {
    /// A purchase that ended so (`rate_limited` only past [`REFUSING_RULES`] rules).
    Outcome(Outcome),
    /// A purchase the limiter refused by this rule.
    Rejected(Box<str>),
    /// A new queue join.
    Joins,
    /// A place admitted by the inlet.
    Admissions,
    /// A place skipped as abandoned.
    Abandons,
    /// An admission whose wait fell in this bucket of [`WAIT_BUCKETS_SECS`].
    Wait(usize),
}

/// One item's cells.
#[derive(Default)]
pub struct ItemCells {
    outcomes: [AtomicU64; OUTCOMES],
    /// Filled once each, in order, by the first refusal of each rule.
    rejected: [(OnceLock<Box<str>>, AtomicU64); REFUSING_RULES],
    joins: AtomicU64,
    admissions: AtomicU64,
    abandons: AtomicU64,
    waits: [AtomicU64; WAIT_BUCKETS_SECS.len() + 1],
}

impl ItemCells {
    /// A purchase that ended with `outcome`.
    pub fn outcome(&self, outcome: Outcome) {
        self.outcomes[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A purchase the limiter refused by `rule`: the rule's slot, taken by the first
    /// refusal of that rule (lock-free: a racing claim of the same slot by another rule
    /// moves on to the next).
    pub fn rejected(&self, rule: &str) {
        for (name, count) in &self.rejected {
            if &**name.get_or_init(|| rule.into()) == rule {
                count.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.outcome(Outcome::RateLimited);
    }

    /// A new queue join.
    pub fn joined(&self) {
        self.joins.fetch_add(1, Ordering::Relaxed);
    }

    /// Places admitted by an inlet step, and places it skipped as abandoned.
    pub fn stepped(&self, admitted: u64, abandoned: u64) {
        self.admissions.fetch_add(admitted, Ordering::Relaxed);
        self.abandons.fetch_add(abandoned, Ordering::Relaxed);
    }

    /// An admission after waiting `wait_secs` since the join.
    pub fn waited(&self, wait_secs: u64) {
        let bucket = WAIT_BUCKETS_SECS
            .iter()
            .position(|bound| wait_secs <= *bound)
            .unwrap_or(WAIT_BUCKETS_SECS.len());
        self.waits[bucket].fetch_add(1, Ordering::Relaxed);
    }

    fn totals(&self, item: i64, into: &mut BTreeMap<(i64, ItemField), u64>) {
        let mut put = |field: ItemField, cell: &AtomicU64| {
            let total = cell.load(Ordering::Relaxed);
            if total > 0 {
                into.insert((item, field), total);
            }
        };
        for (outcome, cell) in Outcome::ALL.iter().zip(&self.outcomes) {
            put(ItemField::Outcome(*outcome), cell);
        }
        for (name, cell) in &self.rejected {
            if let Some(name) = name.get() {
                put(ItemField::Rejected(name.clone()), cell);
            }
        }
        put(ItemField::Joins, &self.joins);
        put(ItemField::Admissions, &self.admissions);
        put(ItemField::Abandons, &self.abandons);
        for (bucket, cell) in self.waits.iter().enumerate() {
            put(ItemField::Wait(bucket), cell);
        }
    }
}

/// Every counted item's cells.
#[derive(Default)]
pub struct ItemTally {
    cells: ArcSwap<HashMap<i64, Arc<ItemCells>>>,
    /// Held only to add an item: two first counts of new items never lose one.
    adding: Mutex<()>,
}

impl std::fmt::Debug for ItemTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ItemTally").finish_non_exhaustive()
    }
}

impl ItemTally {
    /// Counts on `item`'s cells (made on its first count). Only for an item the
    /// catalog knows: the map is bounded by the catalog (module docs).
    pub fn count(&self, item: i64, count: impl FnOnce(&ItemCells)) {
        if let Some(cells) = self.cells.load().get(&item) {
            return count(cells);
        }
        let _adding = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        let mut cells = HashMap::clone(&self.cells.load());
        let added = Arc::clone(cells.entry(item).or_default());
        self.cells.store(Arc::new(cells));
        count(&added);
    }

    /// Every non-zero running total, by item and field.
    pub fn totals(&self) -> BTreeMap<(i64, ItemField), u64> {
        let mut totals = BTreeMap::new();
        for (item, cells) in self.cells.load().iter() {
            cells.totals(*item, &mut totals);
        }
        totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_counts_outcomes_refusals_by_rule_and_waits_by_bucket() {
        let tally = ItemTally::default();
        tally.count(7, |c| c.outcome(Outcome::Created));
        tally.count(7, |c| c.rejected("user"));
        tally.count(7, |c| c.rejected("user"));
        tally.count(7, |c| c.rejected("ip"));
        tally.count(8, |c| c.stepped(3, 1));
        tally.count(8, |c| c.waited(0));
        tally.count(8, |c| c.waited(4_000));
        let totals = tally.totals();
        let get = |item, field| totals.get(&(item, field)).copied();
        assert_eq!(get(7, ItemField::Outcome(Outcome::Created)), Some(1));
        assert_eq!(get(7, ItemField::Rejected("user".into())), Some(2));
        assert_eq!(get(7, ItemField::Rejected("ip".into())), Some(1));
        assert_eq!(get(8, ItemField::Admissions), Some(3));
        assert_eq!(get(8, ItemField::Abandons), Some(1));
        assert_eq!(get(8, ItemField::Wait(0)), Some(1));
        assert_eq!(get(8, ItemField::Wait(WAIT_BUCKETS_SECS.len())), Some(1));
        assert_eq!(totals.len(), 7);
    }

    #[test]
    fn refusals_past_the_rules_told_apart_count_as_rate_limited() {
        let cells = ItemCells::default();
        for rule in 0..REFUSING_RULES + 2 {
            cells.rejected(&format!("r{rule}"));
        }
        let mut totals = BTreeMap::new();
        cells.totals(1, &mut totals);
        assert_eq!(
            totals.get(&(1, ItemField::Outcome(Outcome::RateLimited))),
            Some(&2)
        );
    }
}
