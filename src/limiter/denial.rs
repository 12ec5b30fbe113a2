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
//! is never later than Redis's own (the script ran after the send). Deadlines are kept
//! in microseconds: Redis's clock reads whole milliseconds, so T counts from the start
//! of the millisecond the script ran in, and the script says how far into it it was
//! (`late`), which comes off the deadline; without that, a local refusal could outlast
//! Redis's by up to a millisecond.
//!
//! The table has a fixed number of slots, each holding at most one denial; a newer one
//! evicts whatever shares its slot. Eviction is always safe: a key not found here is
//! simply asked of Redis. Entries carry the generation of the rule set they were made
//! under, and a lookup names the generation it decides under: once the rules really
//! change (see `Limiter::replace_policies`), older denials no longer count.
//!
//! **One probe at a time.** A full sliding window opens one slot at a time: under a
//! stampede the global `api` key's waits are about a millisecond, and when a denial
//! expires every request arriving before Redis answers again would ask Redis too. So
//! the first request to find a denial expired becomes its probe: the others wait for
//! the probe's answer (never longer than the limiter's timeout) and then look again.
//! If Redis refused, the new denial refuses them locally, exactly; if the probe was
//! admitted and took the last slot (the key's remaining count is 0), the next request
//! probes; otherwise the key is forgotten and requests go to Redis freely again.

use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};

use foldhash::fast::RandomState;
use tokio::sync::Notify;

/// The fixed table of denials, one per slot; one per process, shared by every worker.
pub struct DenialCache {
    slots: Box<[Mutex<Option<Denial>>]>,
    /// Seeded at random per process, so a client cannot aim its keys at one slot to
    /// evict someone's denial (which would only cost a Redis call anyway).
    hasher: RandomState,
}

struct Denial {
    key: Box<str>,
    until_us: i64,
    generation: u64,
    /// Set while one request asks Redis about this expired denial; the others wait on it.
    probe: Option<Arc<Notify>>,
}

/// What the cache knows about a key.
pub enum Seen {
    /// Redis refused it and cannot admit it for this long (µs).
    Refused {
        /// The wait left, in microseconds.
        wait_us: i64,
    },
    /// Its denial expired and a probe is asking Redis: wait on this, then look again.
    Probing(Arc<Notify>),
    /// Its denial expired and nobody is asking: [`DenialCache::claim`] it.
    Expired,
    /// Nothing recorded (or only under other rules): ask Redis.
    Unknown,
}

impl DenialCache {
    /// A table of `slots` entries; 0 turns the cache off (every lookup misses).
    pub fn new(slots: usize) -> Self {
        Self {
            slots: (0..slots).map(|_| Mutex::new(None)).collect(),
            hasher: RandomState::default(),
        }
    }

    /// Whether there are slots at all (0 turns the cache off).
    pub fn is_enabled(&self) -> bool {
        !self.slots.is_empty()
    }

    /// Records that `key` is refused until `until_us` (local microseconds) under the
    /// rules of `generation`: the generation the refused call was decided under. Wakes
    /// the requests waiting on a probe of `key`.
    pub fn insert(&self, key: &str, until_us: i64, generation: u64) {
        let Some(mut slot) = self.lock(key) else {
            return;
        };
        let previous = slot.replace(Denial {
            key: key.into(),
            until_us,
            generation,
            probe: None,
        });
        drop(slot);
        if let Some(probe) = previous.filter(|d| &*d.key == key).and_then(|d| d.probe) {
            probe.notify_waiters();
        }
    }

    /// What is known about `key` at `now_us` under the rules of `generation`.
    pub fn seen(&self, key: &str, now_us: i64, generation: u64) -> Seen {
        let Some(slot) = self.lock(key) else {
            return Seen::Unknown;
        };
        match slot.as_ref() {
            Some(d) if &*d.key == key && d.generation == generation => {
                if now_us < d.until_us {
                    Seen::Refused {
                        wait_us: d.until_us - now_us,
                    }
                } else if let Some(probe) = &d.probe {
                    Seen::Probing(Arc::clone(probe))
                } else {
                    Seen::Expired
                }
            }
            _ => Seen::Unknown,
        }
    }

    /// Whether `probe` is still asking about `key` (a waiter checks this after
    /// registering, so that an answer that came in between is not waited for).
    pub fn is_probing(&self, key: &str, probe: &Arc<Notify>) -> bool {
        self.lock(key).is_some_and(|slot| {
            slot.as_ref().is_some_and(|d| {
                &*d.key == key && d.probe.as_ref().is_some_and(|p| Arc::ptr_eq(p, probe))
            })
        })
    }

    /// Makes the caller the probe of `key`'s expired denial; `None` when the entry is no
    /// longer an unclaimed expired denial under `generation`.
    pub fn claim<'a>(&'a self, key: &'a str, now_us: i64, generation: u64) -> Option<Probe<'a>> {
        let mut slot = self.lock(key)?;
        let denial = slot.as_mut().filter(|d| {
            &*d.key == key
                && d.generation == generation
                && d.until_us <= now_us
                && d.probe.is_none()
        })?;
        let notify = Arc::new(Notify::new());
        denial.probe = Some(Arc::clone(&notify));
        Some(Probe {
            cache: self,
            key,
            notify,
            forget: false,
        })
    }

    fn lock(&self, key: &str) -> Option<MutexGuard<'_, Option<Denial>>> {
        if self.slots.is_empty() {
            return None;
        }
        let index = self.hasher.hash_one(key) as usize % self.slots.len();
        let slot = self.slots.get(index)?;
        Some(slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

/// The right to ask Redis about an expired denial while others wait. Dropping it hands
/// the key to the next request (the key is still believed full); [`Probe::forget`]
/// says it is not, and lets every request ask Redis again.
pub struct Probe<'a> {
    cache: &'a DenialCache,
    key: &'a str,
    notify: Arc<Notify>,
    forget: bool,
}

impl Probe<'_> {
    /// The key being probed.
    pub fn key(&self) -> &str {
        self.key
    }

    /// The probe was admitted with room to spare (or refused by another rule): nothing
    /// is known to be full about this key any more.
    pub fn forget(mut self) {
        self.forget = true;
    }
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if let Some(mut slot) = self.cache.lock(self.key) {
            let ours = slot.as_ref().is_some_and(|d| {
                &*d.key == self.key
                    && d.probe
                        .as_ref()
                        .is_some_and(|p| Arc::ptr_eq(p, &self.notify))
            });
            if ours {
                if self.forget {
                    *slot = None;
                } else if let Some(denial) = slot.as_mut() {
                    denial.probe = None;
                }
            }
        }
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_for(cache: &DenialCache, key: &str, now_us: i64, generation: u64) -> Option<i64> {
        match cache.seen(key, now_us, generation) {
            Seen::Refused { wait_us } => Some(wait_us),
            _ => None,
        }
    }

    #[test]
    fn a_denial_holds_until_its_deadline_and_not_a_millisecond_longer() {
        let cache = DenialCache::new(64);
        cache.insert("k", 1_500, 0);
        assert_eq!(refused_for(&cache, "k", 1_000, 0), Some(500));
        assert_eq!(refused_for(&cache, "k", 1_499, 0), Some(1));
        assert_eq!(refused_for(&cache, "k", 1_500, 0), None);
        assert!(matches!(cache.seen("k", 1_500, 0), Seen::Expired));
        assert!(matches!(cache.seen("other", 1_000, 0), Seen::Unknown));
    }

    #[test]
    fn a_denial_counts_only_under_the_rules_it_was_made_under() {
        let cache = DenialCache::new(64);
        cache.insert("k", 10_000, 1);
        assert_eq!(refused_for(&cache, "k", 0, 1), Some(10_000));
        assert!(matches!(cache.seen("k", 0, 2), Seen::Unknown));
        assert!(
            cache.claim("k", 20_000, 2).is_none(),
            "no probe across generations"
        );
        // A refusal decided under the old rules and recorded late does not count.
        cache.insert("late", 10_000, 1);
        assert_eq!(refused_for(&cache, "late", 0, 2), None);
        cache.insert("k", 10_000, 2);
        assert_eq!(refused_for(&cache, "k", 0, 2), Some(10_000));
    }

    #[test]
    fn a_full_table_evicts_and_an_evicted_key_just_misses() {
        let cache = DenialCache::new(1);
        cache.insert("a", 10_000, 0);
        cache.insert("b", 10_000, 0);
        assert!(matches!(cache.seen("a", 0, 0), Seen::Unknown));
        assert_eq!(refused_for(&cache, "b", 0, 0), Some(10_000));
        // Bounded: however many keys, never more live entries than slots.
        let cache = DenialCache::new(16);
        for i in 0..10_000 {
            cache.insert(&format!("key-{i}"), 10_000, 0);
        }
        let live = (0..10_000)
            .filter(|i| refused_for(&cache, &format!("key-{i}"), 0, 0).is_some())
            .count();
        assert!((1..=16).contains(&live), "{live} live denials in 16 slots");
    }

    #[test]
    fn a_renewed_denial_replaces_the_old_deadline() {
        let cache = DenialCache::new(8);
        cache.insert("k", 1_000, 0);
        cache.insert("k", 3_000, 0);
        assert_eq!(refused_for(&cache, "k", 2_000, 0), Some(1_000));
    }

    #[test]
    fn an_expired_denial_has_one_probe_and_the_others_wait_for_it() {
        let cache = DenialCache::new(8);
        cache.insert("k", 1_000, 0);
        assert!(cache.claim("k", 999, 0).is_none(), "not expired yet");
        let probe = cache
            .claim("k", 1_000, 0)
            .expect("the first request probes");
        assert!(cache.claim("k", 1_000, 0).is_none(), "only one probe");
        let Seen::Probing(notify) = cache.seen("k", 1_000, 0) else {
            panic!("others see the probe")
        };
        assert!(cache.is_probing("k", &notify));
        // The probe was refused again: a new denial, and the probe is over.
        cache.insert("k", 2_000, 0);
        assert!(!cache.is_probing("k", &notify));
        drop(probe);
        assert_eq!(
            refused_for(&cache, "k", 1_500, 0),
            Some(500),
            "a late drop keeps it"
        );
    }

    #[test]
    fn a_probe_hands_over_when_dropped_and_clears_the_key_when_forgotten() {
        let cache = DenialCache::new(8);
        cache.insert("k", 1_000, 0);
        drop(cache.claim("k", 1_000, 0));
        assert!(
            matches!(cache.seen("k", 1_000, 0), Seen::Expired),
            "next one probes"
        );
        cache
            .claim("k", 1_000, 0)
            .expect("claimable again")
            .forget();
        assert!(
            matches!(cache.seen("k", 1_000, 0), Seen::Unknown),
            "forgotten"
        );
    }

    #[tokio::test]
    async fn waiters_wake_when_the_probe_ends() {
        let cache = DenialCache::new(8);
        cache.insert("k", 1_000, 0);
        let probe = cache.claim("k", 1_000, 0).expect("probe");
        let Seen::Probing(notify) = cache.seen("k", 1_000, 0) else {
            panic!("probing")
        };
        let notified = notify.notified();
        drop(probe);
        tokio::time::timeout(std::time::Duration::from_secs(5), notified)
            .await
            .expect("woken");
    }

    #[test]
    fn a_disabled_cache_never_refuses() {
        let cache = DenialCache::new(0);
        assert!(!cache.is_enabled());
        cache.insert("k", 10_000, 0);
        assert!(matches!(cache.seen("k", 0, 0), Seen::Unknown));
    }
}
