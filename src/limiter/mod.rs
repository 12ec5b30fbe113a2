//! The rate-limiter engine.
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
//! - [`http`]: the actix guard and the response headers.
//!
//! Several instances share one truth: all state lives in Redis, none in the process.

pub mod backend;
pub mod clock;
pub mod http;
pub mod keys;
pub mod policy;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::metrics::{Metrics, RedisPurpose};
use crate::store::RedisStore;
use backend::{Decision, ScriptBackend};
pub use clock::{Clock, ManualClock};
pub use keys::Caller;
pub use policy::{Algorithm, FailMode, LimiterSettings, Policy, PolicySet};

pub struct Limiter {
    redis: RedisStore,
    backend: ScriptBackend,
    /// Swapped whole when rules change; readers take a snapshot per request.
    policies: ArcSwap<PolicySet>,
    clock: Clock,
    timeout: Duration,
    metrics: Arc<Metrics>,
    fail_open_log: BurstLog,
}

/// The request may proceed.
#[derive(Debug, Clone)]
pub struct Admission {
    pub policy: Arc<Policy>,
    pub algorithm: Algorithm,
    /// `None` when admitted without asking Redis (fail-open).
    pub decision: Option<Decision>,
}

/// The limiter refused: which rule, its message, how long to wait.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub policy: Arc<Policy>,
    pub algorithm: Algorithm,
    pub decision: Decision,
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
    /// Index of the rule that answers for the refusal (the first refusing one).
    pub fn rule_index(&self) -> usize {
        self.decision.first_refusing.unwrap_or(0)
    }

    pub fn dimension(&self) -> &str {
        &self.policy.rules[self.rule_index()].name
    }

    pub fn message(&self) -> &str {
        &self.policy.rules[self.rule_index()].message
    }

    /// The longest wait among the refusing rules: only then would all of them admit.
    pub fn retry_after_ms(&self) -> u64 {
        self.decision
            .retry_after_ms
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(1) as u64
    }
}

impl Limiter {
    pub fn new(
        redis: RedisStore,
        settings: &LimiterSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, policy::PolicyError> {
        let policies = PolicySet::parse(&settings.policies)?;
        let limiter = Self {
            redis,
            backend: ScriptBackend::default(),
            policies: ArcSwap::from_pointee(policies),
            clock: Clock::from_source(settings.clock),
            timeout: Duration::from_millis(settings.timeout_ms),
            metrics,
            fail_open_log: BurstLog::default(),
        };
        limiter.init_metrics();
        Ok(limiter)
    }

    /// Replaces the clock (tests freeze time with a [`ManualClock`]).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Swaps in a new rule set; requests already deciding finish with the old one.
    pub fn replace_policies(&self, policies: PolicySet) {
        self.policies.store(Arc::new(policies));
        self.init_metrics();
    }

    pub fn policy(&self, name: &str) -> Option<Arc<Policy>> {
        self.policies.load().get(name).cloned()
    }

    pub fn policy_names(&self) -> Vec<String> {
        self.policies
            .load()
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    pub fn backend(&self) -> &ScriptBackend {
        &self.backend
    }

    /// Decides `policy` for `caller`, with the policy's own algorithm unless `algorithm`
    /// overrides it. One Redis round trip, bounded by the configured timeout; on a Redis
    /// failure the policy's fail mode decides.
    pub async fn check(
        &self,
        policy_name: &str,
        algorithm: Option<Algorithm>,
        caller: &Caller<'_>,
    ) -> Result<Admission, Rejection> {
        let policy = self
            .policy(policy_name)
            .ok_or_else(|| Rejection::Misconfigured(format!("unknown policy {policy_name:?}")))?;
        let algorithm = algorithm.unwrap_or(policy.algorithm);
        if !policy.enabled {
            return Ok(Admission {
                policy,
                algorithm,
                decision: None,
            });
        }
        let keys = policy
            .rules
            .iter()
            .map(|rule| keys::redis_key(self.redis.prefix(), &policy.name, algorithm, rule, caller))
            .collect::<Result<Vec<_>, _>>()?;
        let request_id = uuid::Uuid::new_v4().simple().to_string();

        let started = Instant::now();
        self.metrics.redis_call(RedisPurpose::Limiter);
        let mut conn = self.redis.conn();
        let call = self.backend.decide(
            &mut conn,
            algorithm,
            &keys,
            &policy.rules,
            self.clock.now_ms(),
            &request_id,
        );
        let outcome = tokio::time::timeout(self.timeout, call).await;
        self.metrics
            .limiter_latency
            .with_label_values(&[policy.name.as_str(), algorithm.as_str()])
            .observe(started.elapsed().as_secs_f64());

        let failure = match outcome {
            Ok(Ok(decision)) => return self.record(policy, algorithm, decision),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {:?}", self.timeout),
        };
        self.metrics
            .redis_errors
            .with_label_values(&["limiter"])
            .inc();
        match policy.fail_mode {
            FailMode::Open => {
                self.metrics
                    .limiter_fail_open
                    .with_label_values(&[policy.name.as_str()])
                    .inc();
                self.fail_open_log.warn(&policy.name, &failure);
                Ok(Admission {
                    policy,
                    algorithm,
                    decision: None,
                })
            }
            FailMode::Closed => {
                self.metrics
                    .limiter_fail_closed
                    .with_label_values(&[policy.name.as_str()])
                    .inc();
                tracing::warn!(policy = %policy.name, error = %failure, "limiter unavailable, failing closed");
                Err(Rejection::Unavailable)
            }
        }
    }

    fn record(
        &self,
        policy: Arc<Policy>,
        algorithm: Algorithm,
        decision: Decision,
    ) -> Result<Admission, Rejection> {
        let decisions = &self.metrics.limiter_decisions;
        if decision.admitted {
            for rule in &policy.rules {
                decisions
                    .with_label_values(&[policy.name.as_str(), rule.name.as_str(), "pass"])
                    .inc();
            }
            Ok(Admission {
                policy,
                algorithm,
                decision: Some(decision),
            })
        } else {
            let refusal = Refusal {
                policy,
                algorithm,
                decision,
            };
            decisions
                .with_label_values(&[refusal.policy.name.as_str(), refusal.dimension(), "reject"])
                .inc();
            Err(Rejection::Refused(Box::new(refusal)))
        }
    }

    /// Every known label combination starts at 0, so dashboards see the series at once.
    fn init_metrics(&self) {
        let policies = self.policies.load();
        for policy in policies.iter() {
            for rule in &policy.rules {
                for outcome in ["pass", "reject"] {
                    self.metrics.limiter_decisions.with_label_values(&[
                        policy.name.as_str(),
                        rule.name.as_str(),
                        outcome,
                    ]);
                }
            }
            self.metrics
                .limiter_fail_open
                .with_label_values(&[policy.name.as_str()]);
            self.metrics
                .limiter_fail_closed
                .with_label_values(&[policy.name.as_str()]);
        }
    }
}

/// Logs a fail-open burst once, then at most every 10 s with the number suppressed:
/// during an outage every request fails open, and a line per request would bury the
/// log (and the disk) exactly when someone needs to read it.
#[derive(Default)]
struct BurstLog {
    last_logged_ms: AtomicI64,
    suppressed: AtomicU64,
}

impl BurstLog {
    const QUIET_MS: i64 = 10_000;

    fn warn(&self, policy: &str, error: &str) {
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
                "limiter unavailable, failing open"
            );
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}
