//! The denial cache: refusals Redis already made, answered again without asking it.
//!
//! When a script refuses rule R for key K with a wait of T ms, K cannot be admitted by R
//! before `sent + T`, where `sent` is when the call was sent:
//! - a sliding-window log only opens a slot when its entries expire, and the script
//!   computed T from the entry that must expire first; a token bucket only gains tokens
//!   with time, and T is when it holds one;
//! - every other call can only make things worse (admissions add entries and take
//!   tokens), and a refused call writes nothing.
//!
//! So until `sent + T` the instance refuses K locally, exactly as Redis would, at the
//! cost of a lock and a string compare. Measured from the send time, the local deadline
//! is never later than Redis's own (the script ran after the send).
//!
//! The table has a fixed number of slots, each holding at most one denial; a newer one
//! evicts whatever shares its slot. Eviction is always safe: a key not found here is
//! simply asked of Redis. Entries carry the generation of the rule set they were made
//! under, and a lookup names the generation it decides under: once the rules really
//! change (see `Limiter::replace_policies`), older denials no longer count.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Mutex;

pub struct DenialCache {
    slots: Box<[Mutex<Option<Denial>>]>,
    /// Random keys: a client cannot aim its keys at one slot to evict someone's denial.
    hasher: RandomState,
}

struct Denial {
    key: Box<str>,
    until_ms: i64,
    generation: u64,
}

impl DenialCache {
    /// A table of `slots` entries; 0 turns the cache off (every lookup misses).
    pub fn new(slots: usize) -> Self {
        Self {
            slots: (0..slots).map(|_| Mutex::new(None)).collect(),
            hasher: RandomState::new(),
        }
    }

    pub fn is_enabled(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Records that `key` is refused until `until_ms` (local milliseconds) under the
    /// rules of `generation`: the generation the refused call was decided under.
    pub fn insert(&self, key: &str, until_ms: i64, generation: u64) {
        let Some(slot) = self.slot(key) else { return };
        let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match slot.as_mut() {
            Some(denial) if &*denial.key == key => {
                denial.until_ms = until_ms;
                denial.generation = generation;
            }
            _ => {
                *slot = Some(Denial {
                    key: key.into(),
                    until_ms,
                    generation,
                })
            }
        }
    }

    /// Milliseconds `key` stays refused at `now_ms` under the rules of `generation`, if
    /// a live denial is recorded.
    pub fn refused_for(&self, key: &str, now_ms: i64, generation: u64) -> Option<i64> {
        let slot = self.slot(key)?;
        let slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let denial = slot.as_ref()?;
        (denial.generation == generation && &*denial.key == key && now_ms < denial.until_ms)
            .then(|| denial.until_ms - now_ms)
    }

    fn slot(&self, key: &str) -> Option<&Mutex<Option<Denial>>> {
        if self.slots.is_empty() {
            return None;
        }
        let index = self.hasher.hash_one(key) as usize % self.slots.len();
        self.slots.get(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_holds_until_its_deadline_and_not_a_millisecond_longer() {
        let cache = DenialCache::new(64);
        cache.insert("k", 1_500, 0);
        assert_eq!(cache.refused_for("k", 1_000, 0), Some(500));
        assert_eq!(cache.refused_for("k", 1_499, 0), Some(1));
        assert_eq!(cache.refused_for("k", 1_500, 0), None);
        assert_eq!(cache.refused_for("other", 1_000, 0), None);
    }

    #[test]
    fn a_denial_counts_only_under_the_rules_it_was_made_under() {
        let cache = DenialCache::new(64);
        cache.insert("k", 10_000, 1);
        assert_eq!(cache.refused_for("k", 0, 1), Some(10_000));
        assert_eq!(cache.refused_for("k", 0, 2), None);
        // A refusal decided under the old rules and recorded late does not count.
        cache.insert("late", 10_000, 1);
        assert_eq!(cache.refused_for("late", 0, 2), None);
        cache.insert("k", 10_000, 2);
        assert_eq!(cache.refused_for("k", 0, 2), Some(10_000));
    }

    #[test]
    fn a_full_table_evicts_and_an_evicted_key_just_misses() {
        let cache = DenialCache::new(1);
        cache.insert("a", 10_000, 0);
        cache.insert("b", 10_000, 0);
        assert_eq!(cache.refused_for("a", 0, 0), None);
        assert_eq!(cache.refused_for("b", 0, 0), Some(10_000));
        // Bounded: however many keys, never more live entries than slots.
        let cache = DenialCache::new(16);
        for i in 0..10_000 {
            cache.insert(&format!("key-{i}"), 10_000, 0);
        }
        let live = (0..10_000)
            .filter(|i| cache.refused_for(&format!("key-{i}"), 0, 0).is_some())
            .count();
        assert!((1..=16).contains(&live), "{live} live denials in 16 slots");
    }

    #[test]
    fn a_renewed_denial_replaces_the_old_deadline() {
        let cache = DenialCache::new(8);
        cache.insert("k", 1_000, 0);
        cache.insert("k", 3_000, 0);
        assert_eq!(cache.refused_for("k", 2_000, 0), Some(1_000));
    }

    #[test]
    fn a_disabled_cache_never_refuses() {
        let cache = DenialCache::new(0);
        assert!(!cache.is_enabled());
        cache.insert("k", 10_000, 0);
        assert_eq!(cache.refused_for("k", 0, 0), None);
    }
}
