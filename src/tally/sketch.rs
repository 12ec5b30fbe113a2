//! Space-Saving (Metwally, Agrawal, El Abbadi, 2005): the most frequent values of a
//! stream in fixed memory. At most `capacity` values are monitored; a new value when
//! full takes the place of the least counted one, inheriting its count as `error`. So a
//! count is an upper bound, over by at most its `error`, and every value seen more than
//! `N / capacity` times of `N` is monitored.
//!
//! Ours, not a crate's: the ones there are (`nodedb-types`, `anomstream-core`,
//! `flowstats`) count a bare key, each inside a larger toolkit, while the offenders need
//! each hitter's refusals by dimension and the others seen with it, without an
//! allocation when the value is already monitored. It is a few dozen lines.
//!
//! Memory: a monitored value costs its slot (the key, its error, [`DIMENSIONS`]
//! dimension counts, [`OTHERS`] other hashes: 224 bytes for a 16-byte key, 232 for an
//! address's 24) and its index entry (~key + 9 bytes): ~260 bytes, so a sketch of 256
//! values is ~66 kB, and the four an instance keeps per minute (refused users and
//! addresses, joins by address and by block) ~270 kB.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use foldhash::fast::RandomState;

/// Dimensions (rules) told apart per hitter; a further one is counted in the total only.
pub const DIMENSIONS: usize = 4;

/// Distinct others remembered per hitter (addresses a user came from, users behind an
/// address or a block): enough to tell one from many, and the reported count stops
/// there.
pub const OTHERS: usize = 16;

/// Dimension names a sketch tells apart (rule names: a handful).
const NAMES: usize = 32;

#[derive(Clone)]
struct Slot<K> {
    key: K,
    error: u64,
    /// (index into the names + 1, count); 0 = unused.
    dimensions: [(u8, u64); DIMENSIONS],
    others: [u64; OTHERS],
    others_len: u8,
}

/// One value's summary: its count (an upper bound), its possible overcount, its counts
/// by dimension since it was monitored, and the distinct others seen with it (capped at
/// [`OTHERS`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Monitored<K> {
    /// The value.
    pub key: K,
    /// Its count: at least the true count, at most `error` over it.
    pub count: u64,
    /// What it inherited from the value it replaced.
    pub error: u64,
    /// Counted by dimension since it was monitored.
    pub dimensions: BTreeMap<String, u64>,
    /// Distinct others seen with it, at most [`OTHERS`].
    pub others: u64,
}

/// A Space-Saving summary over keys `K` (module docs).
pub struct SpaceSaving<K> {
    capacity: usize,
    /// Hashed with foldhash, seeded per process (as the denial cache): the keys are
    /// client-made, but the map never holds more than `capacity` of them.
    index: HashMap<K, usize, RandomState>,
    slots: Vec<Slot<K>>,
    /// Each slot's count.
    counts: Vec<u64>,
    /// The slots as a binary min-heap by count, and each slot's place in it: a new value
    /// when full takes the least counted slot (the heap's top) in O(1), and a count's
    /// +1 moves its slot down O(log capacity) places at most. A scan of every count
    /// instead cost ~250 ns a new value at 256 slots, which a spray of distinct keys (a
    /// crowd of accounts and addresses, refused) pays on every refusal.
    heap: Vec<usize>,
    place: Vec<usize>,
    names: Vec<Box<str>>,
}

impl<K: Hash + Eq + Copy> SpaceSaving<K> {
    /// An empty summary of at most `capacity` values (at least one), allocated whole now.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            capacity,
            index: HashMap::with_capacity_and_hasher(capacity, RandomState::default()),
            slots: Vec::with_capacity(capacity),
            counts: Vec::with_capacity(capacity),
            heap: Vec::with_capacity(capacity),
            place: Vec::with_capacity(capacity),
            names: Vec::new(),
        }
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Counts `key` once, under `dimension` if any, seen with `other` if any (a hash).
    /// Allocates nothing once `key` is monitored and `dimension` was seen before.
    pub fn add(&mut self, key: K, dimension: Option<&str>, other: Option<u64>) {
        let at = match self.index.get(&key) {
            Some(at) => *at,
            None => self.monitor(key),
        };
        let name = dimension.and_then(|d| self.name(d));
        self.counts[at] += 1;
        self.sink(self.place[at]);
        let slot = &mut self.slots[at];
        if let Some(name) = name {
            if let Some(cell) = slot
                .dimensions
                .iter_mut()
                .find(|(n, _)| *n == name || *n == 0)
            {
                *cell = (name, cell.1 + 1);
            }
        }
        if let Some(other) = other {
            let known = &slot.others[..usize::from(slot.others_len)];
            if !known.contains(&other) && usize::from(slot.others_len) < OTHERS {
                slot.others[usize::from(slot.others_len)] = other;
                slot.others_len += 1;
            }
        }
    }

    /// The slot `key` now has: a free one, or the least counted one's.
    fn monitor(&mut self, key: K) -> usize {
        let fresh = |count| Slot {
            key,
            error: count,
            dimensions: [(0, 0); DIMENSIONS],
            others: [0; OTHERS],
            others_len: 0,
        };
        if self.slots.len() < self.capacity {
            let at = self.slots.len();
            self.slots.push(fresh(0));
            self.counts.push(0);
            self.place.push(at);
            self.heap.push(at);
            self.rise(at);
            self.index.insert(key, at);
            return at;
        }
        // The heap's top: the least counted slot (it keeps its count as the newcomer's
        // error, and its place, since the count does not change).
        let at = self.heap[0];
        let least = self.counts[at];
        self.index.remove(&self.slots[at].key);
        self.slots[at] = fresh(least);
        self.index.insert(key, at);
        at
    }

    /// The dimension's index + 1, `None` past [`NAMES`] names.
    fn name(&mut self, dimension: &str) -> Option<u8> {
        let at = match self.names.iter().position(|n| &**n == dimension) {
            Some(at) => at,
            None if self.names.len() < NAMES => {
                self.names.push(dimension.into());
                self.names.len() - 1
            }
            None => return None,
        };
        u8::try_from(at + 1).ok()
    }

    /// Moves the slot at heap place `from` up past every parent counted more: a new
    /// slot, counted 0.
    fn rise(&mut self, mut from: usize) {
        while from > 0 {
            let parent = (from - 1) / 2;
            if self.counts[self.heap[parent]] <= self.counts[self.heap[from]] {
                return;
            }
            self.heap.swap(from, parent);
            self.place[self.heap[from]] = from;
            self.place[self.heap[parent]] = parent;
            from = parent;
        }
    }

    /// Moves the slot at heap place `from` down past every child counted less, after
    /// its count grew.
    fn sink(&mut self, mut from: usize) {
        loop {
            let (left, right) = (2 * from + 1, 2 * from + 2);
            let mut least = from;
            for child in [left, right] {
                if child < self.heap.len()
                    && self.counts[self.heap[child]] < self.counts[self.heap[least]]
                {
                    least = child;
                }
            }
            if least == from {
                return;
            }
            self.heap.swap(from, least);
            self.place[self.heap[from]] = from;
            self.place[self.heap[least]] = least;
            from = least;
        }
    }

    /// The monitored values, most counted first; the summary is emptied (its memory
    /// kept) for the next minute.
    pub fn take(&mut self) -> Vec<Monitored<K>> {
        let mut taken: Vec<Monitored<K>> = self
            .slots
            .drain(..)
            .zip(self.counts.drain(..))
            .map(|(slot, count)| Monitored {
                key: slot.key,
                count,
                error: slot.error,
                dimensions: slot
                    .dimensions
                    .iter()
                    .filter(|(name, _)| *name > 0)
                    .filter_map(|(name, count)| {
                        let name = self.names.get(usize::from(*name) - 1)?;
                        Some((name.to_string(), *count))
                    })
                    .collect(),
                others: u64::from(slot.others_len),
            })
            .collect();
        self.index.clear();
        self.heap.clear();
        self.place.clear();
        taken.sort_by_key(|m| std::cmp::Reverse(m.count));
        taken
    }
}

/// The merge of summaries (instances, minutes): per value, the sum of the counts, of
/// the errors and of the dimensions, and the largest count of others (a lower bound of
/// the distinct ones); most counted first. A value a summary does not hold adds nothing
/// from it, as the offenders' query sums the stored minutes.
pub fn merge<K: Hash + Eq + Clone>(
    summaries: impl IntoIterator<Item = Vec<Monitored<K>>>,
) -> Vec<Monitored<K>> {
    let mut merged: HashMap<K, Monitored<K>> = HashMap::new();
    for summary in summaries {
        for hitter in summary {
            match merged.get_mut(&hitter.key) {
                Some(into) => {
                    into.count += hitter.count;
                    into.error += hitter.error;
                    into.others = into.others.max(hitter.others);
                    for (dimension, count) in hitter.dimensions {
                        *into.dimensions.entry(dimension).or_default() += count;
                    }
                }
                None => {
                    merged.insert(hitter.key.clone(), hitter);
                }
            }
        }
    }
    let mut merged: Vec<_> = merged.into_values().collect();
    merged.sort_by_key(|m| std::cmp::Reverse(m.count));
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_summary_replaces_its_least_counted_value_and_keeps_the_bound() {
        let mut sketch = SpaceSaving::new(2);
        for key in [1, 1, 1, 2, 3] {
            sketch.add(key, Some("user"), Some(key * 10));
        }
        let taken = sketch.take();
        assert_eq!(
            taken
                .iter()
                .map(|m| (m.key, m.count, m.error))
                .collect::<Vec<_>>(),
            [(1, 3, 0), (3, 2, 1)]
        );
        assert_eq!(taken[0].dimensions, [("user".to_string(), 3)].into());
        assert_eq!(taken[1].others, 1);
        assert!(sketch.is_empty());
    }

    /// The heap's order holds after every count, and with it Space-Saving's bounds: a
    /// monitored value's count is at least its true count and at most `error` over it,
    /// through fills, sprays of new values (each taking the least counted slot) and a
    /// minute's `take`.
    #[test]
    fn the_least_counted_slot_is_the_heaps_top_and_the_bounds_hold() {
        let mut random = Xorshift(0x2545_f491_4f6c_dd1d);
        let mut sketch = SpaceSaving::new(16);
        for _minute in 0..3 {
            let mut exact: HashMap<u64, u64> = HashMap::new();
            for _ in 0..5_000 {
                // Half from 8 heavy values, half a spray over 1 000.
                let u = random.next();
                let key = if u < 0.5 {
                    (u * 16.0) as u64
                } else {
                    (u * 2_000.0) as u64
                };
                *exact.entry(key).or_default() += 1;
                sketch.add(key, None, None);
                for (place, slot) in sketch.heap.iter().enumerate() {
                    assert_eq!(sketch.place[*slot], place);
                    if place > 0 {
                        let parent = sketch.heap[(place - 1) / 2];
                        assert!(sketch.counts[parent] <= sketch.counts[*slot]);
                    }
                }
                let least = sketch.counts.iter().min().copied();
                assert_eq!(sketch.heap.first().map(|at| sketch.counts[*at]), least);
            }
            for hitter in sketch.take() {
                let truth = exact[&hitter.key];
                assert!(hitter.count >= truth && hitter.count - hitter.error <= truth);
            }
            assert!(sketch.is_empty() && sketch.heap.is_empty());
        }
    }

    #[test]
    fn others_are_counted_distinct_and_capped() {
        let mut sketch = SpaceSaving::new(4);
        for other in (0..40).chain(0..40) {
            sketch.add(7, None, Some(other));
        }
        assert_eq!(sketch.take()[0].others, OTHERS as u64);
    }

    /// A small deterministic generator (xorshift), so the test needs no crate.
    struct Xorshift(u64);

    impl Xorshift {
        fn next(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Zipf (s = 1) over `values`, by inverting its cumulative distribution.
    fn zipf(values: usize) -> Vec<f64> {
        let weights: Vec<f64> = (1..=values).map(|rank| 1.0 / rank as f64).collect();
        let total: f64 = weights.iter().sum();
        let mut cumulative = 0.0;
        weights
            .iter()
            .map(|w| {
                cumulative += w / total;
                cumulative
            })
            .collect()
    }

    #[test]
    fn the_merged_top_20_of_three_instances_over_five_minutes_recalls_at_least_95_percent() {
        let cdf = zipf(10_000);
        let mut random = Xorshift(0x9e37_79b9_7f4a_7c15);
        let mut exact: HashMap<u64, u64> = HashMap::new();
        let mut summaries = Vec::new();
        for _minute in 0..5 {
            for _instance in 0..3 {
                let mut sketch = SpaceSaving::new(256);
                for _ in 0..10_000 {
                    let u = random.next();
                    let value = cdf.partition_point(|c| *c < u) as u64;
                    *exact.entry(value).or_default() += 1;
                    sketch.add(value, None, None);
                }
                summaries.push(sketch.take());
            }
        }
        let merged = merge(summaries);
        let mut truth: Vec<(u64, u64)> = exact.into_iter().collect();
        truth.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let true_top: Vec<u64> = truth.iter().take(20).map(|(v, _)| *v).collect();
        let found = merged
            .iter()
            .take(20)
            .filter(|m| true_top.contains(&m.key))
            .count();
        let recall = found as f64 / 20.0;
        assert!(recall >= 0.95, "top-20 recall {recall}");
    }
}
