//! Fallback limits: a policy whose fail mode is `local` is decided in process while
//! Redis cannot be asked, each rule at this instance's share of its threshold.
//!
//! **The share.** With `n` instances alive at the last heartbeat (see [`super::peers`]),
//! a rule of threshold `T` admits `⌈T/n⌉` per window on each instance: rounding up keeps
//! every rule usable (a lockout of 5 over 3 instances still lets each one try), and the
//! whole fleet admits at most `n·⌈T/n⌉ ≤ T + n − 1` per key and window while Redis is
//! away. A bucket rule (token bucket, GCRA) counts as a window of its quota: `capacity`
//! per the time to refill it, which admits no more than the bucket would.
//!
//! **The count.** Each key keeps [`SLOTS`] counters of one sixteenth of the window and
//! counts every sub-window that overlaps the last window, so it errs one sub-window on
//! the strict side and never admits more than the share in any window of the rule's
//! length: the last admission in a window saw every earlier one in it. Sixteen counters
//! instead of one entry per request bound a key's memory whatever its threshold.
//!
//! **All or nothing**, like the scripts: every enforced rule is checked under one lock,
//! and only an admission writes, to every rule.
//!
//! **Costs**, like the scripts: a request of cost `c` under a rule (the edge's
//! descriptors; a policy's requests cost 1) is admitted when the count plus `c` is
//! within the share, and counts `c`; a refused one writes nothing. A cost above the
//! share never fits: it is refused with the rule's window. Shadow rules are not counted here: they
//! report what Redis would refuse, and Redis is away.
//!
//! **Bounded, per policy.** Each policy counts in a table of its own
//! ([`super::key_table`]), of at most `max_keys` keys (a client makes keys with every
//! address or client id it uses), so a flood on one policy never touches another's
//! counts. When a table is full, keys whose window has passed are swept (at most once a
//! second); then a key is evicted only if it is not refusing (its next request would be
//! admitted), the one that spent the least of its share first, so nobody who is refused
//! gets a fresh count by a flood, and a flood of fresh keys evicts its own kind first. A count that
//! callers keep for themselves ([`FallbackLimits::take`], the admin sign-in lockout) is
//! never evicted at all while live: every failure counts. A newcomer that finds no key
//! it may evict is refused, for a second ([`FULL_WAIT_MS`]): see docs/limiter.md for what
//! each policy's bound means under a flood.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::key_table::{Eviction, Held, KeyTable};

use super::backend::{Cost, Decision};
use super::installed::Enforced;
use super::outcome::{record, refuse_locally};
use super::policy::Rule;
use super::{Admission, Algorithm, Refusal, Rejection};

/// Counters per key: sixteen sub-windows cover a window, plus the one it starts in.
pub const SLOTS: usize = 17;
/// Sub-windows per window.
const SUB_WINDOWS: u64 = (SLOTS - 1) as u64;
/// The wait a newcomer is refused with when its policy's table is full of keys that may
/// not leave: the least time before a sweep may free a place.
pub const FULL_WAIT_MS: u64 = 1_000;

/// One rule as the fallback counts it: at most `share` per `window_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// Requests this instance may admit per window: the rule's threshold over the instances
    /// counted.
    pub share: u64,
    /// The rule's window, in milliseconds.
    pub window_ms: u64,
}

impl Share {
    /// `threshold` per `window_ms` across the fleet, split over `instances` (≥ 1),
    /// rounded up.
    pub fn of(threshold: u64, window_ms: u64, instances: u64) -> Self {
        Self {
            share: threshold.div_ceil(instances.max(1)).max(1),
            window_ms: window_ms.max(1),
        }
    }

    fn sub_window_ms(self) -> u64 {
        self.window_ms.div_ceil(SUB_WINDOWS).max(1)
    }
}

/// What the fallback decided for a set of rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Recorded under every rule; `remaining` and `next_ms` are the tightest rule's
    /// (its index in the slice given): what it has left, and when it admits again if
    /// that is nothing.
    Admitted {
        /// The tightest rule's index.
        rule: usize,
        /// What it has left after this request.
        remaining: u64,
        /// When `remaining` is 0, ms until it admits again; else 0.
        next_ms: u64,
    },
    /// Nothing recorded. `rule` is the first refusing one, `wait_ms` its wait;
    /// `longest_ms` the longest among the refusing rules (each ≥ 1).
    Refused {
        /// The first refusing rule's index.
        rule: usize,
        /// Its wait, in ms.
        wait_ms: u64,
        /// The longest wait among the refusing rules, in ms.
        longest_ms: u64,
    },
}

/// The fallback's verdict as a script would have answered it (no shaping, no near-limit
/// or shadow bits: the fallback keeps neither).
impl From<Verdict> for Decision {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Admitted {
                rule,
                remaining,
                next_ms,
            } => Decision::Admitted {
                tightest: rule,
                remaining: remaining as i64,
                next_slot_ms: next_ms as i64,
                delay_ms: 0,
                near_limit: 0,
                shadow_refused: 0,
            },
            Verdict::Refused {
                rule,
                wait_ms,
                longest_ms,
            } => Decision::Refused {
                rule,
                retry_after_ms: wait_ms as i64,
                longest_retry_after_ms: longest_ms.max(wait_ms) as i64,
            },
        }
    }
}

/// One key's sub-window counters.
#[derive(Debug, Clone)]
struct Counts {
    /// The sub-window length these counters were kept with (a window edited while
    /// Redis is away starts the key afresh).
    sub_ms: u64,
    /// The index (time / `sub_ms`) of the newest sub-window counted.
    newest: u64,
    /// Indexed by sub-window index modulo [`SLOTS`]: the sub-windows `newest − 16` to
    /// `newest`, older ones already cleared.
    counts: [u32; SLOTS],
    /// The rule's share at the last decision: what a full table asks to know whether
    /// this key is refusing.
    share: Share,
}

impl Counts {
    fn new(share: Share, now_ms: u64) -> Self {
        let sub_ms = share.sub_window_ms();
        Self {
            sub_ms,
            newest: now_ms / sub_ms,
            counts: [0; SLOTS],
            share,
        }
    }

    /// Moves the newest sub-window up to `now`, clearing those that left the ring.
    fn advance(&mut self, now_ms: u64) {
        let index = now_ms / self.sub_ms;
        if index <= self.newest {
            return;
        }
        if index - self.newest >= SLOTS as u64 {
            self.counts = [0; SLOTS];
        } else {
            for cleared in self.newest + 1..=index {
                self.counts[(cleared % SLOTS as u64) as usize] = 0;
            }
        }
        self.newest = index;
    }

    /// The oldest sub-window index that overlaps the window ending at `now`.
    fn oldest_counted(&self, window_ms: u64, now_ms: u64) -> u64 {
        let oldest = now_ms.saturating_sub(window_ms) / self.sub_ms;
        oldest.max(self.newest.saturating_sub(SUB_WINDOWS))
    }

    /// Admissions counted against the window ending at `now` (after `advance`).
    fn used(&self, window_ms: u64, now_ms: u64) -> u64 {
        (self.oldest_counted(window_ms, now_ms)..=self.newest)
            .map(|index| u64::from(self.counts[(index % SLOTS as u64) as usize]))
            .sum()
    }

    /// Milliseconds until `cost` more fit in `share`: the oldest sub-windows leave the
    /// count one by one as the window moves past them. A cost above the share never
    /// fits: the window.
    fn wait_ms(&self, share: Share, now_ms: u64, cost: u64) -> u64 {
        let fits = |used: u64| used + cost <= share.share;
        let mut used = self.used(share.window_ms, now_ms);
        if cost <= share.share {
            for index in self.oldest_counted(share.window_ms, now_ms)..=self.newest {
                if fits(used) {
                    break;
                }
                used -= u64::from(self.counts[(index % SLOTS as u64) as usize]);
                // Sub-window `index` stops overlapping once now − window reaches its end.
                let leaves_at = (index + 1) * self.sub_ms + share.window_ms;
                if fits(used) {
                    return leaves_at.saturating_sub(now_ms).max(1);
                }
            }
        }
        share.window_ms.max(1)
    }

    fn is_stale(&self, now_ms: u64) -> bool {
        now_ms / self.sub_ms > self.newest + SUB_WINDOWS
    }
}

impl Counts {
    /// What is counted against the window ending at `now`, without moving the counters.
    fn used_at(&self, now_ms: u64) -> u64 {
        let mut now = self.clone();
        now.advance(now_ms);
        now.used(self.share.window_ms, now_ms)
    }
}

impl Held for Counts {
    fn refuses(&self, now_ms: u64) -> bool {
        self.used_at(now_ms) >= self.share.share
    }

    fn weight(&self, now_ms: u64) -> u64 {
        self.used_at(now_ms).saturating_mul(1_000) / self.share.share.max(1)
    }

    fn is_stale(&self, now_ms: u64) -> bool {
        Counts::is_stale(self, now_ms)
    }
}

/// The policies' tables, each created at its policy's first decision in process.
type Tables = HashMap<String, KeyTable<String, Counts>>;

/// The fallback counters: a table per policy (see the module docs).
pub struct FallbackLimits {
    tables: Mutex<Tables>,
    max_keys: usize,
}

impl FallbackLimits {
    /// Tables of at most `max_keys` keys each.
    pub fn new(max_keys: usize) -> Self {
        Self {
            tables: Mutex::new(HashMap::new()),
            max_keys: max_keys.max(1),
        }
    }

    /// Decides one request of `policy`: `rules[i]` is counted under `keys[i]`, `costs[i]`
    /// hits (empty: 1 under every rule), at `now_ms` (any monotonic millisecond clock,
    /// the same on every call). A full table evicts a key that is not refusing to make
    /// room.
    pub fn decide(
        &self,
        policy: &str,
        keys: &[&str],
        rules: &[Share],
        costs: &[Cost],
        now_ms: u64,
    ) -> Verdict {
        self.decide_in(policy, Eviction::NotRefusing, keys, rules, costs, now_ms)
    }

    /// Takes one place of `key` for a caller that keeps its own count (a lockout): the
    /// same decision, in a table that never evicts a live key.
    pub fn take(&self, policy: &str, key: &str, share: Share, now_ms: u64) -> Verdict {
        self.decide_in(policy, Eviction::StaleOnly, &[key], &[share], &[], now_ms)
    }

    fn decide_in(
        &self,
        policy: &str,
        eviction: Eviction,
        keys: &[&str],
        rules: &[Share],
        costs: &[Cost],
        now_ms: u64,
    ) -> Verdict {
        let cost = |rule: usize| costs.get(rule).map_or(1, |cost| u64::from(cost.hits()));
        let Ok(mut tables) = self.tables.lock() else {
            // Poisoned: a panic mid-update. Refusing is the safe answer for a limit.
            return Verdict::Refused {
                rule: 0,
                wait_ms: 1_000,
                longest_ms: 1_000,
            };
        };
        if !tables.contains_key(policy) {
            tables.insert(policy.to_string(), KeyTable::new(self.max_keys, eviction));
        }
        let Some(table) = tables.get_mut(policy) else {
            return Verdict::Refused {
                rule: 0,
                wait_ms: FULL_WAIT_MS,
                longest_ms: FULL_WAIT_MS,
            };
        };
        let mut refused: Option<(usize, u64, u64)> = None;
        let mut tightest = (0, u64::MAX, 0);
        for (rule, (key, share)) in keys.iter().zip(rules).enumerate() {
            let counts = match table.get_mut(*key) {
                Some(counts) => {
                    if counts.sub_ms != share.sub_window_ms() {
                        *counts = Counts::new(*share, now_ms);
                    }
                    counts.share = *share;
                    counts.advance(now_ms);
                    counts.clone()
                }
                None => Counts::new(*share, now_ms),
            };
            let used = counts.used(share.window_ms, now_ms);
            if used + cost(rule) > share.share {
                let wait = counts.wait_ms(*share, now_ms, cost(rule));
                refused = Some(match refused {
                    None => (rule, wait, wait),
                    Some((first, own, longest)) => (first, own, longest.max(wait)),
                });
                continue;
            }
            let remaining = share.share - used - cost(rule);
            if remaining < tightest.1 {
                let next = if remaining == 0 {
                    // This admission fills the rule: when does it free a place?
                    let mut after = counts;
                    let slot = &mut after.counts[(after.newest % SLOTS as u64) as usize];
                    *slot = slot.saturating_add(cost(rule) as u32);
                    after.wait_ms(*share, now_ms, 1)
                } else {
                    0
                };
                tightest = (rule, remaining, next);
            }
        }
        if let Some((rule, wait_ms, longest_ms)) = refused {
            return Verdict::Refused {
                rule,
                wait_ms,
                longest_ms,
            };
        }
        let newcomers: Vec<usize> = (0..keys.len())
            .filter(|&rule| !table.contains(keys[rule]))
            .collect();
        let own = |key: &String| keys.contains(&key.as_str());
        if !newcomers.is_empty() && table.make_room(newcomers.len(), now_ms, own).is_err() {
            // Nothing may leave for them: refused, and nothing written.
            return Verdict::Refused {
                rule: newcomers[0],
                wait_ms: FULL_WAIT_MS,
                longest_ms: FULL_WAIT_MS,
            };
        }
        for (rule, (key, share)) in keys.iter().zip(rules).enumerate() {
            if !table.contains(*key) {
                table.insert((*key).to_string(), Counts::new(*share, now_ms));
            }
            if let Some(counts) = table.get_mut(*key) {
                counts.advance(now_ms);
                let slot = &mut counts.counts[(counts.newest % SLOTS as u64) as usize];
                // A cost fits the share, which fits a u32 slot's count in any sane rule.
                *slot = slot.saturating_add(u32::try_from(cost(rule)).unwrap_or(u32::MAX));
            }
        }
        Verdict::Admitted {
            rule: tightest.0,
            remaining: tightest.1,
            next_ms: tightest.2,
        }
    }

    /// Gives back one admission of `key` made at `at_ms` for `policy` (a sign-in that
    /// turned out right is not a failure), if its sub-window is still counted.
    pub fn give_back(&self, policy: &str, key: &str, at_ms: u64) {
        let Ok(mut tables) = self.tables.lock() else {
            return;
        };
        let Some(counts) = tables.get_mut(policy).and_then(|table| table.get_mut(key)) else {
            return;
        };
        let index = at_ms / counts.sub_ms;
        if index + SUB_WINDOWS >= counts.newest && index <= counts.newest {
            let slot = &mut counts.counts[(index % SLOTS as u64) as usize];
            *slot = slot.saturating_sub(1);
        }
    }

    /// Keys held now by `policy`'s table (for tests and the soak's memory check).
    pub fn len(&self, policy: &str) -> usize {
        self.tables
            .lock()
            .ok()
            .and_then(|tables| tables.get(policy).map(KeyTable::len))
            .unwrap_or(0)
    }
}

/// A rule's limit as the fallback counts it: a window rule's threshold per window; a
/// bucket's capacity per the time it takes to refill it from empty, which admits no
/// more than the bucket would in any such span.
pub(super) fn limit(rule: &Rule, algorithm: Algorithm) -> (u64, u64) {
    match algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra => (
            rule.capacity,
            rule.capacity
                .saturating_mul(rule.refill_ms)
                .div_ceil(rule.refill_tokens.max(1)),
        ),
        _ => (rule.threshold, rule.window_ms),
    }
}

/// The policy's decision by the fallback limits: `keys` are its rules' keys (shadow
/// rules' too, left out here), `instances` the fleet sharing the limits, `now_ms` the
/// limiter's local clock. Counted like a Redis decision; a refusal also as local.
pub(super) fn decide_policy(
    limits: &FallbackLimits,
    enforced: &Enforced,
    algorithm: Algorithm,
    keys: &[String],
    instances: u64,
    now_ms: u64,
) -> Result<Admission, Rejection> {
    let policy = &enforced.policy;
    let rules = &policy.rules[..policy.enforced];
    let shares: Vec<Share> = rules
        .iter()
        .map(|rule| {
            let (threshold, window_ms) = limit(rule, algorithm);
            Share::of(threshold, window_ms, instances)
        })
        .collect();
    let keys: Vec<&str> = keys[..policy.enforced].iter().map(String::as_str).collect();
    match limits.decide(&policy.name, &keys, &shares, &[], now_ms) {
        admitted @ Verdict::Admitted { .. } => record(enforced, algorithm, admitted.into()),
        Verdict::Refused {
            rule,
            wait_ms,
            longest_ms,
        } => Err(refuse_locally(
            Refusal {
                policy: Arc::clone(policy),
                algorithm,
                rule,
                own_wait_ms: wait_ms,
                longest_wait_ms: longest_ms.max(wait_ms),
                local: true,
            },
            enforced,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(verdict: Verdict) -> bool {
        matches!(verdict, Verdict::Admitted { .. })
    }

    #[test]
    fn the_share_is_rounded_up_and_never_zero() {
        assert_eq!(Share::of(100, 60_000, 1).share, 100);
        assert_eq!(Share::of(100, 60_000, 3).share, 34);
        assert_eq!(Share::of(5, 900_000, 2).share, 3);
        assert_eq!(Share::of(1, 1_000, 4).share, 1);
        assert_eq!(
            Share::of(7, 1_000, 0).share,
            7,
            "no heartbeat yet counts as alone"
        );
    }

    #[test]
    fn admits_the_share_then_refuses_until_the_oldest_sub_window_leaves() {
        let limits = FallbackLimits::new(100);
        let share = Share::of(3, 1_600, 1);
        let t0 = 10_000;
        for n in 0..3 {
            assert!(
                admitted(limits.decide("p", &["k"], &[share], &[], t0 + n)),
                "{n}"
            );
        }
        let Verdict::Refused { wait_ms, .. } = limits.decide("p", &["k"], &[share], &[], t0 + 5)
        else {
            panic!("the fourth in the window is refused");
        };
        // Sub-windows of 100 ms: the one at 10 000 leaves the count once now − 1 600
        // reaches 10 100, at 11 700.
        assert_eq!(wait_ms, 11_700 - (t0 + 5));
        assert!(!admitted(limits.decide("p", &["k"], &[share], &[], 11_699)));
        assert!(admitted(limits.decide("p", &["k"], &[share], &[], 11_700)));
    }

    /// The bound the docs state: in every window of the rule's length, at most the
    /// share admitted, whatever the arrival pattern.
    #[test]
    fn no_window_ever_holds_more_than_the_share() {
        let limits = FallbackLimits::new(100);
        let share = Share::of(7, 1_000, 1);
        let mut admitted_at = Vec::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut now = 0u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            now += state % 23;
            if admitted(limits.decide("p", &["k"], &[share], &[], now)) {
                admitted_at.push(now);
            }
        }
        for (i, &start) in admitted_at.iter().enumerate() {
            let within = admitted_at[i..]
                .iter()
                .take_while(|&&t| t < start + 1_000)
                .count();
            assert!(
                within <= 7,
                "{within} admissions in the window from {start}"
            );
        }
        // Conservative by at most one sub-window (63 ms): it still admits most of the rate.
        let rate = admitted_at.len() as f64 / (now as f64 / 1_000.0);
        assert!(rate > 6.0, "{rate} per second");
    }

    #[test]
    fn all_or_nothing_across_rules() {
        let limits = FallbackLimits::new(100);
        let wide = Share::of(10, 60_000, 1);
        let narrow = Share::of(1, 60_000, 1);
        assert!(admitted(limits.decide(
            "p",
            &["w", "n1"],
            &[wide, narrow],
            &[],
            0
        )));
        let Verdict::Refused {
            rule, longest_ms, ..
        } = limits.decide("p", &["w", "n1"], &[wide, narrow], &[], 1)
        else {
            panic!("n1 is full");
        };
        assert_eq!((rule, longest_ms), (1, 60_000 + 3_750 - 1));
        // The refusal wrote nothing: `w` still has 9 of 10 left.
        let Verdict::Admitted {
            rule, remaining, ..
        } = limits.decide("p", &["w"], &[wide], &[], 2)
        else {
            panic!("w admits");
        };
        assert_eq!((rule, remaining), (0, 8));
    }

    #[test]
    fn a_full_table_never_evicts_a_refusing_key_and_then_refuses_newcomers() {
        let limits = FallbackLimits::new(3);
        let share = Share::of(2, 1_000, 1);
        // "a" is refused from its third request on; "b" and "c" have room left.
        for key in ["a", "a", "b", "c"] {
            assert!(admitted(limits.decide("p", &[key], &[share], &[], 1)));
        }
        assert!(!admitted(limits.decide("p", &["a"], &[share], &[], 2)));
        // Newcomers take the places of keys with room, never "a"'s.
        for (n, key) in ["d", "e"].iter().enumerate() {
            assert!(admitted(limits.decide(
                "p",
                &[key],
                &[share],
                &[],
                3 + n as u64
            )));
            assert!(admitted(limits.decide(
                "p",
                &[key],
                &[share],
                &[],
                3 + n as u64
            )));
            assert_eq!(limits.len("p"), 3);
            assert!(
                !admitted(limits.decide("p", &["a"], &[share], &[], 3 + n as u64)),
                "{key}"
            );
        }
        // Every key refuses now: a newcomer is refused, for a second, and written nowhere.
        let Verdict::Refused { wait_ms, .. } = limits.decide("p", &["h"], &[share], &[], 10) else {
            panic!("no place for a newcomer");
        };
        assert_eq!(wait_ms, FULL_WAIT_MS);
        assert_eq!(limits.len("p"), 3);
        // Long after, the stale keys are swept instead of evicted one by one.
        assert!(admitted(limits.decide("p", &["h"], &[share], &[], 10_000)));
        assert_eq!(limits.len("p"), 1);
    }

    #[test]
    fn each_policy_has_a_table_of_its_own_and_a_lockout_keeps_every_live_count() {
        let limits = FallbackLimits::new(2);
        let lockout = Share::of(5, 60_000, 1);
        for ip in ["10.0.0.1", "10.0.0.2"] {
            assert!(admitted(limits.take("admin_auth", ip, lockout, 1)));
        }
        // A flood on another policy fills its own table only.
        for n in 0..100 {
            let key = format!("client-{n}");
            limits.decide("limited", &[&key], &[Share::of(100, 60_000, 1)], &[], 2);
        }
        assert_eq!(limits.len("admin_auth"), 2);
        assert_eq!(limits.len("limited"), 2);
        // A third address finds no place: the two live counts (one failure each, far
        // from refusing) are never evicted.
        assert!(!admitted(limits.take("admin_auth", "10.0.0.3", lockout, 3)));
        assert_eq!(limits.len("admin_auth"), 2);
    }

    #[test]
    fn a_given_back_admission_frees_its_place() {
        let limits = FallbackLimits::new(10);
        let share = Share::of(1, 60_000, 1);
        assert!(admitted(limits.decide("p", &["ip"], &[share], &[], 5)));
        assert!(!admitted(limits.decide("p", &["ip"], &[share], &[], 6)));
        limits.give_back("p", "ip", 5);
        assert!(admitted(limits.decide("p", &["ip"], &[share], &[], 7)));
    }

    #[test]
    fn a_cost_counts_its_hits_and_a_refused_cost_writes_nothing() {
        let limits = FallbackLimits::new(16);
        let share = Share::of(5, 1_600, 1);
        let cost = |hits| [Cost::new(hits).unwrap()];
        let Verdict::Admitted { remaining, .. } = limits.decide("p", &["k"], &[share], &cost(3), 1)
        else {
            panic!("3 of 5 fit");
        };
        assert_eq!(remaining, 2);
        // 3 more do not fit, nor does a cost above the whole share (its wait: the window).
        let Verdict::Refused { wait_ms, .. } = limits.decide("p", &["k"], &[share], &cost(3), 2)
        else {
            panic!("3 + 3 > 5");
        };
        assert_eq!(wait_ms, 1_698);
        let Verdict::Refused { wait_ms, .. } = limits.decide("p", &["k"], &[share], &cost(6), 2)
        else {
            panic!("6 > 5");
        };
        assert_eq!(wait_ms, 1_600);
        // The refusals wrote nothing: 2 still fit, and then nothing.
        assert_eq!(
            limits.decide("p", &["k"], &[share], &cost(2), 3),
            Verdict::Admitted {
                rule: 0,
                remaining: 0,
                next_ms: 1_697
            }
        );
        assert!(!admitted(limits.decide("p", &["k"], &[share], &[], 4)));
    }
}
