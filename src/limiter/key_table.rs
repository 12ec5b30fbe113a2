//! A bounded table of per-key state kept in process (the fallback limits' counts, the
//! waiting room's poll buckets): a client makes keys at will, so the table holds at most
//! `max` of them, and what leaves it when it is full is chosen so that no flood of fresh
//! keys can hand anyone a fresh allowance.
//!
//! When a newcomer finds the table full: entries that no longer matter ([`Held::is_stale`],
//! as good as absent) are swept, at most once a second; if it is still full, a clock hand
//! looks at up to [`LOOK_AT`] entries from where it last stopped and evicts a stale one,
//! or else the lightest ([`Held::weight`]) the table's [`Eviction`] lets go, never one the
//! request itself is counted under. A key that is refusing is never evicted: evicting it
//! would let its holder in again at once; and the lightest goes first, so a flood of fresh
//! keys evicts its own kind before a key that has spent most of its allowance. If none of
//! those may go, the newcomer gets no place ([`Full`]); what it is then answered is its
//! caller's choice.

use std::hash::Hash;

use foldhash::fast::RandomState;
use indexmap::{Equivalent, IndexMap};

/// Entries a full table looks at, from its clock hand, for one it may evict.
pub const LOOK_AT: usize = 64;
/// Least time between two sweeps of a full table's stale entries.
const SWEEP_EVERY_MS: u64 = 1_000;

/// The state of one key, as the table needs to see it.
pub trait Held {
    /// Whether the key's next request would be refused now: such an entry never leaves
    /// the table before it is stale.
    fn refuses(&self, now_ms: u64) -> bool;
    /// Whether the entry is as good as absent now (nothing it counts is still counted).
    fn is_stale(&self, now_ms: u64) -> bool;
    /// How much of its allowance the key has spent, in thousandths: of the entries that
    /// may leave, the lightest does.
    fn weight(&self, now_ms: u64) -> u64;
}

/// Which live entries may leave a full table for a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// None: only stale entries leave. For a count where every entry matters (the admin
    /// sign-in lockout: a failure forgotten is a guess given back), newcomers wait.
    StaleOnly,
    /// One that is not refusing: it starts again from nothing, so its holder gets at most
    /// what it had left plus its allowance, never more than its allowance in a window
    /// it is refused in.
    NotRefusing,
}

/// No entry may leave a full table for the newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

/// At most `max` keys' state, evicting as the module docs describe.
pub struct KeyTable<K, V> {
    entries: IndexMap<K, V, RandomState>,
    max: usize,
    eviction: Eviction,
    /// Where the next look for an entry to evict starts (an index into `entries`).
    hand: usize,
    last_sweep_ms: Option<u64>,
}

impl<K: Hash + Eq, V: Held> KeyTable<K, V> {
    /// An empty table of at most `max` keys, evicting as `eviction` allows.
    pub fn new(max: usize, eviction: Eviction) -> Self {
        Self {
            entries: IndexMap::with_hasher(RandomState::default()),
            max: max.max(1),
            eviction,
            hand: 0,
            last_sweep_ms: None,
        }
    }

    /// The key's state, if the table holds it.
    pub fn get<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> Option<&V> {
        self.entries.get(key)
    }

    /// The key's state, to update in place.
    pub fn get_mut<Q: ?Sized + Hash + Equivalent<K>>(&mut self, key: &Q) -> Option<&mut V> {
        self.entries.get_mut(key)
    }

    /// Whether the table holds the key.
    pub fn contains<Q: ?Sized + Hash + Equivalent<K>>(&self, key: &Q) -> bool {
        self.entries.contains_key(key)
    }

    /// Keys held, stale ones included until a sweep.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Makes room for `newcomers` more keys (their places to be taken by [`Self::insert`]
    /// at once), never evicting a key `keep` names (the request's own), or answers
    /// [`Full`].
    pub fn make_room(
        &mut self,
        newcomers: usize,
        now_ms: u64,
        keep: impl Fn(&K) -> bool,
    ) -> Result<(), Full> {
        let room = |table: &Self| table.entries.len() + newcomers <= table.max;
        if room(self) {
            return Ok(());
        }
        if self
            .last_sweep_ms
            .is_none_or(|last| now_ms >= last + SWEEP_EVERY_MS)
        {
            self.last_sweep_ms = Some(now_ms);
            self.entries.retain(|_, held| !held.is_stale(now_ms));
        }
        while !room(self) {
            self.evict_one(now_ms, &keep)?;
        }
        Ok(())
    }

    /// Takes a place [`Self::make_room`] made.
    pub fn insert(&mut self, key: K, held: V) {
        self.entries.insert(key, held);
    }

    fn evict_one(&mut self, now_ms: u64, keep: &impl Fn(&K) -> bool) -> Result<(), Full> {
        let len = self.entries.len();
        let looked = LOOK_AT.min(len);
        let mut lightest: Option<(usize, u64)> = None;
        for step in 0..looked {
            let index = (self.hand + step) % len;
            let Some((key, held)) = self.entries.get_index(index) else {
                continue;
            };
            if keep(key) {
                continue;
            }
            if held.is_stale(now_ms) {
                lightest = Some((index, 0));
                break;
            }
            if self.eviction == Eviction::NotRefusing && !held.refuses(now_ms) {
                let weight = held.weight(now_ms);
                if lightest.is_none_or(|(_, w)| weight < w) {
                    lightest = Some((index, weight));
                }
            }
        }
        if len > 0 {
            self.hand = (self.hand + looked) % len;
        }
        let (index, _) = lightest.ok_or(Full)?;
        // The last entry moves into its place.
        self.entries.swap_remove_index(index);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refusing while `refusing`, stale from `stale_at`.
    struct Entry {
        refusing: bool,
        stale_at: u64,
        weight: u64,
    }

    impl Held for Entry {
        fn refuses(&self, _: u64) -> bool {
            self.refusing
        }
        fn is_stale(&self, now_ms: u64) -> bool {
            now_ms >= self.stale_at
        }
        fn weight(&self, _: u64) -> u64 {
            self.weight
        }
    }

    fn entry(refusing: bool) -> Entry {
        Entry {
            refusing,
            stale_at: 1_000_000,
            weight: 1,
        }
    }

    const KEEP_NONE: fn(&u64) -> bool = |_| false;

    #[test]
    fn a_full_table_evicts_only_keys_that_are_not_refusing() {
        let mut table = KeyTable::new(10, Eviction::NotRefusing);
        for key in 0..10 {
            table.insert(key, entry(key % 3 == 0));
        }
        for newcomer in 10..16 {
            table
                .make_room(1, 5, KEEP_NONE)
                .expect("a key that is not refusing leaves");
            table.insert(newcomer, entry(true));
            assert_eq!(table.len(), 10);
        }
        for key in [0, 3, 6, 9] {
            assert!(table.contains(&key), "refusing key {key} kept");
        }
        // Now every key refuses: the newcomer gets no place, and nothing left.
        assert_eq!(table.make_room(1, 5, KEEP_NONE), Err(Full));
        assert_eq!(table.len(), 10);
    }

    #[test]
    fn a_stale_only_table_keeps_every_live_key_and_sweeps_the_stale_ones() {
        let mut table = KeyTable::new(4, Eviction::StaleOnly);
        for key in 0..4 {
            table.insert(
                key,
                Entry {
                    refusing: false,
                    stale_at: 100 * (key + 1),
                    weight: 1,
                },
            );
        }
        assert_eq!(
            table.make_room(1, 50, KEEP_NONE),
            Err(Full),
            "every key is live"
        );
        assert_eq!(table.len(), 4);
        // At 250 the first two are stale, but a sweep waits a second after the last:
        // the hand still finds them one by one.
        table
            .make_room(2, 250, KEEP_NONE)
            .expect("two stale keys leave");
        assert_eq!(table.len(), 2);
        assert!(table.contains(&2) && table.contains(&3));
    }

    #[test]
    fn the_lightest_key_leaves_first_and_never_the_requests_own() {
        let mut table = KeyTable::new(3, Eviction::NotRefusing);
        for (key, weight) in [(0u64, 900), (1, 10), (2, 500)] {
            let held = Entry {
                refusing: false,
                stale_at: 1_000_000,
                weight,
            };
            table.insert(key, held);
        }
        table.make_room(1, 5, |key| *key == 1).expect("room");
        assert!(table.contains(&0) && table.contains(&1) && !table.contains(&2));
        let heavy = Entry {
            refusing: false,
            stale_at: 1_000_000,
            weight: 700,
        };
        table.insert(3, heavy);
        table.make_room(1, 5, KEEP_NONE).expect("room");
        assert!(table.contains(&0) && table.contains(&3) && !table.contains(&1));
    }
}
