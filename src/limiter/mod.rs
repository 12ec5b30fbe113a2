//! The rate-limiter engine: it enforces whatever policies it is given and knows no
//! application's (the sale's live in `configuration::policies`).
//!
//! One call to [`Limiter::check`] decides every rule of a policy in **one** Redis round
//! trip, atomically and all-or-nothing: either every rule admits and every rule records
//! the request, or nothing is written and the answer names the first refusing rule and
//! how long to wait.
//!
//! - [`policy`]: rules and policies as data, checked once.
//! - [`keys`]: how a rule and a caller become a Redis key.
//! - [`backend`]: the Lua scripts (`lua/`) and their calling convention.
//! - [`clock`]: Redis time, app time, or a manual clock for tests.
//! - [`denial`]: refusals Redis made, answered again locally until they expire.
//!
//! Several instances share one truth: all state lives in Redis. The process keeps only
//! the denial cache, which repeats refusals Redis made and that cannot have changed yet,
//! so it never admits what Redis would refuse nor refuses what Redis would admit.

pub mod backend;
pub mod clock;
pub mod denial;

pub mod keys;
pub mod policy;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use prometheus::{Histogram, IntCounter};

use crate::metrics::{Metrics, RedisPurpose};
use crate::store::RedisStore;
use backend::{Decision, ScriptBackend};
pub use clock::{Clock, ManualClock};
use denial::{DenialCache, Probe, Seen};
pub use keys::Caller;
pub use policy::{Algorithm, FailMode, LimiterSettings, Policy, PolicySet};

pub struct Limiter {
    redis: RedisStore,
    backend: ScriptBackend,
    /// Swapped whole when rules change; a request decides with one snapshot.
    installed: ArcSwap<Installed>,
    clock: Clock,
    metrics: Arc<Metrics>,
    denials: DenialCache,
    /// Epoch of the local milliseconds the denial cache keeps its deadlines in.
    epoch: Instant,
    /// Request ids (the sliding window's members) are this instance's random tag plus a
    /// counter: unique across instances without a random number per request.
    instance_tag: u64,
    sequence: AtomicU64,
    fail_open_log: BurstLog,
    fail_closed_log: BurstLog,
}

/// The policies in force, each with its metric handles resolved, and the generation
/// that the denial cache stamps its entries with.
struct Installed {
    set: PolicySet,
    generation: u64,
    policies: HashMap<String, Arc<Enforced>>,
}

/// A policy and its metric series, looked up once per rule change instead of by label
/// on every decision.
struct Enforced {
    policy: Arc<Policy>,
    /// Per rule: `limiter_decisions{outcome="pass"}`, `{outcome="reject"}`, and
    /// `limiter_local_refusals`.
    passes: Vec<IntCounter>,
    rejects: Vec<IntCounter>,
    local_refusals: Vec<IntCounter>,
    fail_open: IntCounter,
    fail_closed: IntCounter,
    /// Per algorithm (indexed by `Algorithm as usize`).
    latency: [Histogram; Algorithm::ALL.len()],
}

impl Installed {
    fn new(set: PolicySet, generation: u64, metrics: &Metrics) -> Self {
        let policies = set
            .iter()
            .map(|policy| {
                let name = policy.name.as_str();
                let per_rule = |counters: &prometheus::IntCounterVec, outcome: Option<&str>| {
                    policy
                        .rules
                        .iter()
                        .map(|rule| match outcome {
                            Some(outcome) => {
                                counters.with_label_values(&[name, rule.name.as_str(), outcome])
                            }
                            None => counters.with_label_values(&[name, rule.name.as_str()]),
                        })
                        .collect()
                };
                let enforced = Enforced {
                    policy: Arc::clone(policy),
                    passes: per_rule(&metrics.limiter_decisions, Some("pass")),
                    rejects: per_rule(&metrics.limiter_decisions, Some("reject")),
                    local_refusals: per_rule(&metrics.limiter_local_refusals, None),
                    fail_open: metrics.limiter_fail_open.with_label_values(&[name]),
                    fail_closed: metrics.limiter_fail_closed.with_label_values(&[name]),
                    latency: Algorithm::ALL.map(|a| {
                        metrics
                            .limiter_latency
                            .with_label_values(&[name, a.as_str()])
                    }),
                };
                (policy.name.clone(), Arc::new(enforced))
            })
            .collect();
        Self {
            set,
            generation,
            policies,
        }
    }
}

/// The request may proceed.
#[derive(Debug, Clone)]
pub struct Admission {
    pub policy: Arc<Policy>,
    pub algorithm: Algorithm,
    /// The tightest rule and what it has left; `None` when admitted without asking
    /// Redis (fail-open, or the policy is disabled).
    pub quota_left: Option<QuotaLeft>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLeft {
    /// Index into the policy's rules.
    pub rule: usize,
    pub remaining: i64,
    /// When `remaining` is 0: ms until `rule` admits again, else 0.
    pub next_slot_ms: i64,
}

/// The limiter refused: which rule, its message, how long to wait.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub policy: Arc<Policy>,
    pub algorithm: Algorithm,
    /// Index into the policy's rules of the rule that answers for the refusal: the first
    /// refusing one.
    pub rule: usize,
    /// How long until that rule would admit (≥ 1).
    pub own_wait_ms: u64,
    /// The longest wait among the refusing rules (≥ 1): only then would all of them
    /// admit.
    pub longest_wait_ms: u64,
    /// Answered from the denial cache, without asking Redis.
    pub local: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    #[error("rate limited")]
    Refused(Box<Refusal>),
    /// Redis could not be asked and the policy fails closed.
    #[error("the rate limiter is unavailable")]
    Unavailable,
    /// A rule keyed by user on a request without one.
    #[error("this limit needs an authenticated user")]
    NeedsUser,
    #[error("limiter misconfigured: {0}")]
    Misconfigured(String),
}

impl Refusal {
    pub fn dimension(&self) -> &str {
        &self.policy.rules[self.rule].name
    }

    pub fn message(&self) -> &str {
        &self.policy.rules[self.rule].message
    }

    /// The longest wait among the refusing rules: only then would all of them admit.
    pub fn retry_after_ms(&self) -> u64 {
        self.longest_wait_ms
    }
}

impl Limiter {
    pub fn new(
        redis: RedisStore,
        settings: &LimiterSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, policy::PolicyError> {
        let policies = PolicySet::parse(&settings.policies)?;
        Ok(Self {
            redis,
            backend: ScriptBackend::default(),
            installed: ArcSwap::from_pointee(Installed::new(policies, 0, &metrics)),
            clock: Clock::from_source(settings.clock),
            metrics,
            denials: DenialCache::new(settings.denial_cache_slots),
            epoch: Instant::now(),
            instance_tag: uuid::Uuid::new_v4().as_u64_pair().0,
            sequence: AtomicU64::new(0),
            fail_open_log: BurstLog::new("failing open"),
            fail_closed_log: BurstLog::new("failing closed"),
        })
    }

    /// Replaces the clock (tests freeze time with a [`ManualClock`]).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Swaps in a new rule set; requests already deciding finish with the old one. A set
    /// equal to the one in force changes nothing (the rules are re-applied
    /// periodically), so the denial cache survives; a real change starts a new
    /// generation, which retires every denial made under the old rules.
    pub fn replace_policies(&self, policies: PolicySet) {
        let current = self.installed.load();
        if current.set == policies {
            return;
        }
        let generation = current.generation + 1;
        self.installed.store(Arc::new(Installed::new(
            policies,
            generation,
            &self.metrics,
        )));
    }

    pub fn policy(&self, name: &str) -> Option<Arc<Policy>> {
        self.installed.load().set.get(name).cloned()
    }

    pub fn policy_names(&self) -> Vec<String> {
        self.installed
            .load()
            .set
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    pub fn backend(&self) -> &ScriptBackend {
        &self.backend
    }

    /// Decides `policy` for `caller`, with the policy's own algorithm unless `algorithm`
    /// overrides it: from the denial cache when a rule already refused one of the
    /// caller's keys, otherwise in one Redis round trip (bounded by the limiter's
    /// timeout); on a Redis failure the policy's fail mode decides.
    pub async fn check(
        &self,
        policy_name: &str,
        algorithm: Option<Algorithm>,
        caller: &Caller<'_>,
    ) -> Result<Admission, Rejection> {
        let (enforced, generation) = {
            let installed = self.installed.load();
            let enforced = installed
                .policies
                .get(policy_name)
                .cloned()
                .ok_or_else(|| {
                    Rejection::Misconfigured(format!("unknown policy {policy_name:?}"))
                })?;
            (enforced, installed.generation)
        };
        let policy = &enforced.policy;
        let algorithm = algorithm.unwrap_or(policy.algorithm);
        if !policy.enabled {
            return Ok(Admission {
                policy: Arc::clone(policy),
                algorithm,
                quota_left: None,
            });
        }
        // The first live denial refuses at once, before the remaining keys are even
        // built: the cheapest answer of a stampede. Its wait is that rule's own, which
        // is never later than the longest Redis would give.
        let now = self.clock.local_us(self.epoch);
        let mut keys = Vec::with_capacity(policy.rules.len());
        let mut contended = false;
        for (index, rule) in policy.rules.iter().enumerate() {
            let key = keys::redis_key(self.redis.prefix(), &policy.name, algorithm, rule, caller)?;
            match self.denials.seen(&key, now, generation) {
                Seen::Refused { wait_us } => {
                    let wait = whole_ms(wait_us);
                    return Err(Self::refuse_locally(
                        Refusal {
                            policy: Arc::clone(policy),
                            algorithm,
                            rule: index,
                            own_wait_ms: wait,
                            longest_wait_ms: wait,
                            local: true,
                        },
                        &enforced,
                    ));
                }
                Seen::Probing(_) | Seen::Expired => contended = true,
                Seen::Unknown => {}
            }
            keys.push(key);
        }
        let probes = if contended {
            self.consult_denials(&enforced, algorithm, &keys, generation)
                .await
                .map_err(|refusal| Self::refuse_locally(refusal, &enforced))?
        } else {
            Vec::new()
        };
        let sent_us = self.clock.local_us(self.epoch);
        let (now_ms, app_late_us) = self.clock.script_now();
        let member = format!(
            "{:016x}{:x}",
            self.instance_tag,
            self.sequence.fetch_add(1, Ordering::Relaxed)
        );
        let invocation = self
            .backend
            .invocation(algorithm, &keys, &policy.rules, now_ms, &member);
        let started = Instant::now();
        let reply = self
            .redis
            .call::<Vec<i64>>(RedisPurpose::Limiter, &invocation)
            .await;
        enforced.latency[algorithm as usize].observe(started.elapsed().as_secs_f64());

        let failure = match reply.map(|raw| backend::decode(&raw, policy.rules.len())) {
            Ok(Some(reply)) => {
                // When the waits started: the send, less how far into its millisecond
                // the clock that counted them was.
                let started_us = sent_us - app_late_us - reply.late_us;
                self.learn(&reply.decision, &keys, probes, started_us, generation);
                return Self::record(&enforced, algorithm, reply.decision);
            }
            Ok(None) => {
                self.metrics.redis_error(RedisPurpose::Limiter);
                "unexpected limiter script reply".to_string()
            }
            Err(e) => e.to_string(),
        };
        match policy.fail_mode {
            FailMode::Open => {
                enforced.fail_open.inc();
                self.fail_open_log.warn(&policy.name, &failure);
                Ok(Admission {
                    policy: Arc::clone(policy),
                    algorithm,
                    quota_left: None,
                })
            }
            FailMode::Closed => {
                enforced.fail_closed.inc();
                self.fail_closed_log.warn(&policy.name, &failure);
                Err(Rejection::Unavailable)
            }
        }
    }

    fn refuse_locally(refusal: Refusal, enforced: &Enforced) -> Rejection {
        enforced.rejects[refusal.rule].inc();
        enforced.local_refusals[refusal.rule].inc();
        Rejection::Refused(Box::new(refusal))
    }

    /// When some key's denial expired: a key like that is probed by one request at a
    /// time; the others wait for its answer, at most the limiter's timeout, and look
    /// again. A live denial found then refuses locally (the first such rule answers,
    /// with the longest of their waits, each no later than Redis's own). Returns the
    /// probes this request holds, to be settled with Redis's answer.
    async fn consult_denials<'k>(
        &'k self,
        enforced: &Enforced,
        algorithm: Algorithm,
        keys: &'k [String],
        generation: u64,
    ) -> Result<Vec<Probe<'k>>, Refusal> {
        if !self.denials.is_enabled() {
            return Ok(Vec::new());
        }
        let deadline = tokio::time::Instant::now() + self.redis.timeout(RedisPurpose::Limiter);
        loop {
            let now = self.clock.local_us(self.epoch);
            let mut refusal: Option<Refusal> = None;
            let mut probing = None;
            let mut expired = Vec::new();
            for (rule, key) in keys.iter().enumerate() {
                match self.denials.seen(key, now, generation) {
                    Seen::Refused { wait_us } => {
                        let wait = whole_ms(wait_us);
                        match refusal.as_mut() {
                            Some(r) => r.longest_wait_ms = r.longest_wait_ms.max(wait),
                            None => {
                                refusal = Some(Refusal {
                                    policy: Arc::clone(&enforced.policy),
                                    algorithm,
                                    rule,
                                    own_wait_ms: wait,
                                    longest_wait_ms: wait,
                                    local: true,
                                })
                            }
                        }
                    }
                    Seen::Probing(notify) => {
                        probing.get_or_insert((key, notify));
                    }
                    Seen::Expired => expired.push(key),
                    Seen::Unknown => {}
                }
            }
            if let Some(refusal) = refusal {
                return Err(refusal);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Vec::new()); // waited long enough: just ask Redis
            }
            if let Some((key, notify)) = probing {
                let notified = notify.notified();
                // Registered before looking again, so an answer in between is not missed.
                if self.denials.is_probing(key, &notify) {
                    let _ = tokio::time::timeout_at(deadline, notified).await;
                }
                continue;
            }
            let probes: Vec<Probe<'k>> = expired
                .iter()
                .filter_map(|key| self.denials.claim(key, now, generation))
                .collect();
            if probes.len() == expired.len() {
                return Ok(probes);
            }
            // Someone claimed one first: drop ours (handing them on) and look again.
        }
    }

    /// Teaches the denial cache what Redis answered. A refusal is recorded for the
    /// refusing rule's key, and so is an admission that took a rule's last slot: that
    /// key is full until its next slot opens. A probe's key is forgotten only when the
    /// answer shows it has room (the tightest rule still had some left, or the probe's
    /// rule came before the tightest and so had more); otherwise (another rule refused
    /// and its own state is unknown) the next request probes.
    fn learn(
        &self,
        decision: &Decision,
        keys: &[String],
        probes: Vec<Probe<'_>>,
        started_us: i64,
        generation: u64,
    ) {
        let (full, wait_ms) = match *decision {
            Decision::Refused {
                rule,
                retry_after_ms,
                ..
            } => (Some(rule), retry_after_ms),
            Decision::Admitted {
                tightest,
                remaining,
                next_slot_ms,
            } => ((remaining <= 0).then_some(tightest), next_slot_ms),
        };
        if let Some(rule) = full {
            self.denials.insert(
                &keys[rule],
                started_us.saturating_add(wait_ms.max(1).saturating_mul(1000)),
                generation,
            );
        }
        for probe in probes {
            // The tightest rule is the first with the fewest left: an earlier rule has
            // more than it, a later one at least as many.
            let has_room = match *decision {
                Decision::Refused { .. } => false,
                Decision::Admitted {
                    tightest,
                    remaining,
                    ..
                } => {
                    remaining > 0 || keys.iter().position(|key| key == probe.key()) < Some(tightest)
                }
            };
            if has_room {
                probe.forget();
            }
        }
    }

    fn record(
        enforced: &Enforced,
        algorithm: Algorithm,
        decision: Decision,
    ) -> Result<Admission, Rejection> {
        match decision {
            Decision::Admitted {
                tightest,
                remaining,
                next_slot_ms,
            } => {
                for passes in &enforced.passes {
                    passes.inc();
                }
                Ok(Admission {
                    policy: Arc::clone(&enforced.policy),
                    algorithm,
                    quota_left: Some(QuotaLeft {
                        rule: tightest,
                        remaining,
                        next_slot_ms,
                    }),
                })
            }
            Decision::Refused {
                rule,
                retry_after_ms,
                longest_retry_after_ms,
            } => {
                enforced.rejects[rule].inc();
                let own_wait_ms = retry_after_ms.max(1);
                Err(Rejection::Refused(Box::new(Refusal {
                    policy: Arc::clone(&enforced.policy),
                    algorithm,
                    rule,
                    own_wait_ms: own_wait_ms as u64,
                    longest_wait_ms: longest_retry_after_ms.max(own_wait_ms) as u64,
                    local: false,
                })))
            }
        }
    }
}

/// A local wait in whole milliseconds for the headers, rounded up (≥ 1): never later
/// than Redis's own answer, which counts whole milliseconds from an earlier start.
fn whole_ms(wait_us: i64) -> u64 {
    (wait_us.max(1) as u64).div_ceil(1000)
}

/// Logs a burst of limiter failures once, then at most every 10 s with the number
/// suppressed: during an outage every request fails (open or closed), and a line per
/// request would bury the log (and the disk) exactly when someone needs to read it.
pub(crate) struct BurstLog {
    /// What the failures mean for requests, e.g. "failing open".
    outcome: &'static str,
    last_logged_ms: AtomicI64,
    suppressed: AtomicU64,
}

impl BurstLog {
    const QUIET_MS: i64 = 10_000;

    pub(crate) fn new(outcome: &'static str) -> Self {
        Self {
            outcome,
            // Far enough in the past that the first failure is logged at once.
            last_logged_ms: AtomicI64::new(i64::MIN / 2),
            suppressed: AtomicU64::new(0),
        }
    }

    pub(crate) fn warn(&self, policy: &str, error: &str) {
        let now = chrono::Utc::now().timestamp_millis();
        let last = self.last_logged_ms.load(Ordering::Relaxed);
        if now - last >= Self::QUIET_MS
            && self
                .last_logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::warn!(
                policy,
                error,
                suppressed,
                "limiter unavailable, {}",
                self.outcome
            );
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}
