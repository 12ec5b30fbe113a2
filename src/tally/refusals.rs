//! The limiter's refusals kept for the history beyond their counts: one in
//! `sample_every` whole (user, address, policy, rule, item), at most `samples_per_second`
//! between two flushes; and the minute's heavy hitters, Space-Saving summaries
//! ([`super::sketch`]) of refused users and addresses and, where a room is on, of queue
//! joins by address and by block of user ids. The stats flush takes them
//! (`crate::stats`).
//!
//! On the refusal path: one relaxed add for the sampling, then one uncontended mutex
//! per sketch, an allocation only for a value not yet monitored's index entry (none:
//! the index is allocated whole) or a new rule name. An unsampled refusal takes no
//! other lock. A join (new ones only) updates the two join sketches.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::sketch::{Monitored, SpaceSaving};

/// Users per block of the join sketch: accounts made in one batch share a block.
pub const BLOCK: i64 = 64;

/// One refusal, whole (personal data: see `crate::stats::record::RefusalSample`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// When, in unix milliseconds.
    pub at_ms: i64,
    /// The refusing policy.
    pub policy: String,
    /// The refusing rule.
    pub rule: String,
    /// The shopper, when the route has one.
    pub user: Option<i64>,
    /// The address as the limiter keys it (`ClientIp`: an IPv6 address by its /64).
    pub ip: IpAddr,
    /// The item, on the sale's routes.
    pub item: Option<i64>,
}

/// One minute's summaries, most counted first; keys carry the item (0 for none).
#[derive(Debug, Default)]
pub struct MinuteHitters {
    /// Refused users.
    pub users: Vec<Monitored<(i64, i64)>>,
    /// Refused addresses.
    pub addresses: Vec<Monitored<(IpAddr, i64)>>,
    /// Queue joins by address.
    pub join_addresses: Vec<Monitored<(IpAddr, i64)>>,
    /// Queue joins by block: the block's first user id.
    pub join_blocks: Vec<Monitored<(i64, i64)>>,
}

impl MinuteHitters {
    /// Whether no summary holds anything.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
            && self.addresses.is_empty()
            && self.join_addresses.is_empty()
            && self.join_blocks.is_empty()
    }
}

/// The samples and the sketches (module docs).
pub struct Refusals {
    sample_every: AtomicU64,
    samples_per_second: AtomicUsize,
    seen: AtomicU64,
    samples: Mutex<Vec<Sample>>,
    dropped: AtomicU64,
    users: Mutex<SpaceSaving<(i64, i64)>>,
    addresses: Mutex<SpaceSaving<(IpAddr, i64)>>,
    join_addresses: Mutex<SpaceSaving<(IpAddr, i64)>>,
    join_blocks: Mutex<SpaceSaving<(i64, i64)>>,
}

impl std::fmt::Debug for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Refusals").finish_non_exhaustive()
    }
}

impl Default for Refusals {
    /// Nothing sampled, sketches of 256 values, until [`Self::configure`].
    fn default() -> Self {
        Self::new(0, 0, 256)
    }
}

/// A value of an address, for the others of a hitter.
fn address_hash(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v4) => u64::from(u32::from(v4)),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            (bits >> 64) as u64 ^ bits as u64 ^ (1 << 63)
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Refusals {
    fn new(sample_every: u64, samples_per_second: usize, capacity: usize) -> Self {
        Self {
            sample_every: AtomicU64::new(sample_every),
            samples_per_second: AtomicUsize::new(samples_per_second),
            seen: AtomicU64::new(0),
            samples: Mutex::new(Vec::with_capacity(samples_per_second)),
            dropped: AtomicU64::new(0),
            users: Mutex::new(SpaceSaving::new(capacity)),
            addresses: Mutex::new(SpaceSaving::new(capacity)),
            join_addresses: Mutex::new(SpaceSaving::new(capacity)),
            join_blocks: Mutex::new(SpaceSaving::new(capacity)),
        }
    }

    /// The history's settings: one refusal in `sample_every` sampled (0: none), at most
    /// `samples_per_second` kept per flush, sketches of `capacity` values. What was
    /// counted so far is dropped.
    pub fn configure(&self, sample_every: u64, samples_per_second: usize, capacity: usize) {
        self.sample_every.store(sample_every, Ordering::Relaxed);
        self.samples_per_second
            .store(samples_per_second, Ordering::Relaxed);
        *lock(&self.samples) = Vec::with_capacity(samples_per_second);
        *lock(&self.users) = SpaceSaving::new(capacity);
        *lock(&self.addresses) = SpaceSaving::new(capacity);
        *lock(&self.join_addresses) = SpaceSaving::new(capacity);
        *lock(&self.join_blocks) = SpaceSaving::new(capacity);
    }

    /// A limiter refusal by `policy`'s `rule` of `user` from `ip` (as the limiter keys
    /// it), on `item` if any.
    pub fn refused(
        &self,
        policy: &str,
        rule: &str,
        user: Option<i64>,
        ip: IpAddr,
        item: Option<i64>,
    ) {
        let every = self.sample_every.load(Ordering::Relaxed);
        if every > 0
            && self
                .seen
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(every)
        {
            self.sample(policy, rule, user, ip, item);
        }
        let tag = item.unwrap_or(0);
        if let Some(user) = user {
            lock(&self.users).add((user, tag), Some(rule), Some(address_hash(ip)));
        }
        lock(&self.addresses).add((ip, tag), Some(rule), user.map(|u| u as u64));
    }

    fn sample(&self, policy: &str, rule: &str, user: Option<i64>, ip: IpAddr, item: Option<i64>) {
        let mut samples = lock(&self.samples);
        if samples.len() >= self.samples_per_second.load(Ordering::Relaxed) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        samples.push(Sample {
            at_ms: chrono::Utc::now().timestamp_millis(),
            policy: policy.to_string(),
            rule: rule.to_string(),
            user,
            ip,
            item,
        });
    }

    /// A new queue join of `user` from `ip` on `item`.
    pub fn joined(&self, item: i64, user: i64, ip: IpAddr) {
        lock(&self.join_addresses).add((ip, item), None, Some(user as u64));
        let block = user.div_euclid(BLOCK) * BLOCK;
        lock(&self.join_blocks).add((block, item), None, Some(user as u64));
    }

    /// The samples kept since the last take, and how many were dropped past the bound.
    pub fn take_samples(&self) -> (Vec<Sample>, u64) {
        let samples = std::mem::take(&mut *lock(&self.samples));
        (samples, self.dropped.swap(0, Ordering::Relaxed))
    }

    /// Counts `dropped` more samples as dropped (a flush that could not keep them).
    pub fn drop_samples(&self, dropped: u64) {
        self.dropped.fetch_add(dropped, Ordering::Relaxed);
    }

    /// The summaries counted since the last take; they start again empty.
    pub fn take_minute(&self) -> MinuteHitters {
        MinuteHitters {
            users: lock(&self.users).take(),
            addresses: lock(&self.addresses).take(),
            join_addresses: lock(&self.join_addresses).take(),
            join_blocks: lock(&self.join_blocks).take(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_refusal_in_n_is_sampled_up_to_the_bound_and_the_rest_are_counted_dropped() {
        let refusals = Refusals::default();
        refusals.configure(2, 3, 8);
        let ip: IpAddr = [10, 0, 0, 1].into();
        for user in 0..10 {
            refusals.refused("seckill", "user", Some(user), ip, Some(7));
        }
        let (samples, dropped) = refusals.take_samples();
        assert_eq!(
            samples.iter().map(|s| s.user).collect::<Vec<_>>(),
            [Some(0), Some(2), Some(4)]
        );
        assert_eq!(dropped, 2);
        let minute = refusals.take_minute();
        assert_eq!(minute.addresses.len(), 1);
        assert_eq!(minute.addresses[0].count, 10);
        assert_eq!(minute.addresses[0].others, 10);
        assert_eq!(minute.users.len(), 8);
        assert!(refusals.take_minute().is_empty());
    }

    #[test]
    fn joins_are_summarised_by_address_and_by_block_of_64_users() {
        let refusals = Refusals::default();
        let ip: IpAddr = [10, 0, 0, 1].into();
        for user in [64, 65, 127, 128] {
            refusals.joined(3, user, ip);
        }
        let minute = refusals.take_minute();
        assert_eq!(minute.join_addresses[0].count, 4);
        assert_eq!(
            minute
                .join_blocks
                .iter()
                .map(|m| (m.key, m.count, m.others))
                .collect::<Vec<_>>(),
            [((64, 3), 3, 3), ((128, 3), 1, 1)]
        );
    }
}
