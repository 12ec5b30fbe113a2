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
//! - [`backend`]: what decides against the shared counts ([`LimitBackend`]): the Lua
//!   scripts (`lua/`) and their calling convention.
//! - [`clock`]: Redis time, app time, or a manual clock for tests.
//! - [`denial`]: refusals Redis made, answered again locally until they expire; `local`
//!   consults and teaches it around each decision.
//! - [`fallback_limits`]: the limits a policy failing `local` enforces in process while Redis
//!   cannot be asked, each rule at this instance's share; [`peers`] counts the
//!   instances that share it; [`key_table`] bounds what is kept per key in process.
//! - [`failover`]: what a failed backend call does, by the policy's fail mode (the admin
//!   lockout's failures take the same path).
//! - [`Ask`]: a decision over rules its caller matched itself, with a cost per rule (the
//!   edge's descriptors), answered by [`Limiter::ask`].
//! - [`blocklist`]: the operator's blocks, refused before any decision, in process.
//! - `installed` (the policies in force with their metric series), `outcome` (what a
//!   check answers), `burst_log` (one warning per outage, not per request).
//!
//! Several instances share one truth: all state lives in Redis. The process keeps the
//! denial cache, which repeats refusals Redis made and that cannot have changed yet,
//! so it never admits what Redis would refuse nor refuses what Redis would admit; and,
//! only while Redis is away, the fallback limits' counts.

mod ask;
pub mod backend;
pub mod blocklist;
mod burst_log;
pub mod clock;
pub mod denial;
pub mod failover;
pub mod fallback_limits;
mod installed;
pub mod key_table;
pub mod keys;
mod local;
mod outcome;
pub mod peers;
pub mod policy;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tracing::Instrument;

use crate::domain::UserId;
use crate::metrics::{Metrics, RedisPurpose};
use crate::store::RedisStore;
pub use ask::{Answer, AnsweredBy, Ask};
pub use backend::{
    BackendError, Cost, FollowUp, LimitBackend, LimitRequest, RedisBackend, Reply, Then,
};
pub use clock::{Clock, ManualClock};
use denial::{DenialCache, Seen};
pub use failover::Failover;
use failover::FailurePath;
use fallback_limits::FallbackLimits;
use installed::{Enforced, Installed};
pub use keys::{Caller, Partition, Scope};
use local::whole_ms;
use outcome::{record, refuse_locally};
pub use outcome::{Admission, QuotaLeft, Refusal, Rejection};
use peers::Peers;
pub use policy::{Algorithm, FailMode, LimiterSettings, Policy, PolicySet};

use crate::vocabulary::LimiterMode;

/// The engine; `B` decides against the shared counts ([`RedisBackend`] but in a test).
pub struct Limiter<B = RedisBackend> {
    backend: B,
    /// The deployment's key prefix, which every rule's key starts with.
    prefix: Box<str>,
    /// How long a request waits on another's probe of the same keys (the backend
    /// call's own timeout).
    probe_timeout: Duration,
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
    failures: FailurePath,
    /// Counts for the policies failing `local`, kept only while Redis is away.
    fallback: FallbackLimits,
    peers: Peers,
    heartbeat: Duration,
}

impl Limiter {
    /// The engine on the deployment's Redis, with the policies of `settings`.
    pub fn new(
        redis: RedisStore,
        settings: &LimiterSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, policy::PolicyError> {
        let prefix = redis.prefix().to_owned();
        let probe_timeout = redis.timeout(RedisPurpose::Limiter);
        let backend = RedisBackend::new(redis, Arc::clone(&metrics));
        Self::with_backend(backend, &prefix, probe_timeout, settings, metrics)
    }

    /// The compiled scripts (their SHA1s for `redis-benchmark`).
    pub fn backend(&self) -> &backend::ScriptBackend {
        self.backend.scripts()
    }

    /// Beats into Redis every heartbeat period, forever, so the fallback limits know
    /// how many instances share each threshold (a failed beat keeps the last count).
    pub async fn beat(self: Arc<Self>) {
        let period = self.heartbeat;
        crate::background::every("limiter heartbeat", period, move || {
            let limiter = Arc::clone(&self);
            async move { limiter.peers.beat(limiter.backend.redis(), period).await }
        })
        .await
    }

    /// This instance's tag in the heartbeat set.
    pub fn instance(&self) -> &str {
        self.peers.tag()
    }

    /// The instances beating in the heartbeat set now (see [`Peers::live`]).
    pub async fn live_instances(&self) -> anyhow::Result<Vec<String>> {
        self.peers.live(self.backend.redis(), self.heartbeat).await
    }
}

impl<B: LimitBackend> Limiter<B> {
    /// The engine on any backend: keys start with `prefix`, and a request waits at most
    /// `probe_timeout` on another's probe of its keys.
    pub fn with_backend(
        backend: B,
        prefix: &str,
        probe_timeout: Duration,
        settings: &LimiterSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, policy::PolicyError> {
        let policies = PolicySet::parse(&settings.policies)?;
        let instance_tag = uuid::Uuid::new_v4().as_u64_pair().0;
        Ok(Self {
            backend,
            prefix: prefix.into(),
            probe_timeout,
            installed: ArcSwap::from_pointee(Installed::new(policies, 0, &metrics)),
            clock: Clock::from_source(settings.clock),
            denials: DenialCache::new(settings.denial_cache_slots),
            epoch: Instant::now(),
            instance_tag,
            sequence: AtomicU64::new(0),
            failures: FailurePath::new(),
            fallback: FallbackLimits::new(settings.fallback_keys),
            peers: Peers::new(
                instance_tag,
                settings.fleet_floor,
                metrics.limiter_instances.clone(),
            ),
            heartbeat: Duration::from_millis(settings.heartbeat_ms.max(1)),
            metrics,
        })
    }

    /// This process's random tag: the history stream names the instance by it.
    pub fn instance_tag(&self) -> u64 {
        self.instance_tag
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

    /// The policy by that name in the rule set in force.
    pub fn policy(&self, name: &str) -> Option<Arc<Policy>> {
        self.installed.load().set.get(name).cloned()
    }

    /// The names of the policies in force, in order.
    pub fn policy_names(&self) -> Vec<String> {
        self.installed
            .load()
            .set
            .iter()
            .map(|p| p.name.clone())
            .collect()
    }

    /// Instances sharing the limits, as the last heartbeat Redis answered counted them,
    /// at least the fleet floor.
    pub fn instances(&self) -> u64 {
        self.peers.alive()
    }

    /// Takes one place of `key` in the fallback limits for a caller that keeps its own
    /// count in Redis (the admin lockout) while Redis is away: `threshold` per
    /// `window_ms` across the fleet, at this instance's share. `Ok` is the time taken,
    /// to give the place back with [`Self::give_back`]; `Err` the wait in ms.
    pub fn take_locally(
        &self,
        policy_name: &str,
        key: &str,
        threshold: u64,
        window_ms: u64,
    ) -> Result<u64, u64> {
        let share = fallback_limits::Share::of(threshold, window_ms, self.peers.alive());
        let now_ms = self.clock.local_us(self.epoch).max(0) as u64 / 1_000;
        match self.fallback.take(policy_name, key, share, now_ms) {
            fallback_limits::Verdict::Admitted { .. } => Ok(now_ms),
            fallback_limits::Verdict::Refused { wait_ms, .. } => Err(wait_ms),
        }
    }

    /// Gives back a place [`Self::take_locally`] took for `policy_name` at `taken_ms`.
    pub fn give_back(&self, policy_name: &str, key: &str, taken_ms: u64) {
        self.fallback.give_back(policy_name, key, taken_ms);
    }

    /// Notes how `policy_name` decided, for a caller that decides it outside
    /// [`Self::check`] (the admin lockout): `limiter_mode` shows it.
    pub fn note_mode(&self, policy_name: &str, mode: LimiterMode) {
        if let Some(enforced) = self.installed.load().policies.get(policy_name) {
            enforced.decided_in(mode);
        }
    }

    /// What `fail_mode` makes of `failure`, a failed Redis call of `policy_name`'s, for a
    /// caller that keeps its own counts in Redis (the admin lockout): the limiter's own
    /// failure path, with its metrics, its mode and its logs; `local` counts in process
    /// (with [`Self::take_locally`]).
    pub fn fail_over<T>(
        &self,
        policy_name: &str,
        fail_mode: FailMode,
        failure: &str,
        local: impl FnOnce() -> T,
    ) -> Failover<T> {
        let installed = self.installed.load();
        let enforced = installed.policies.get(policy_name).map(|e| &**e);
        self.failures
            .fail_over(enforced, policy_name, fail_mode, failure, local)
    }

    /// Decides `policy` for `caller`, with the policy's own algorithm unless `algorithm`
    /// overrides it: from the denial cache when a rule already refused one of the
    /// caller's keys, otherwise in one Redis round trip (bounded by the limiter's
    /// timeout); on a Redis failure the policy's fail mode decides.
    ///
    /// Traced by a `debug` span `limiter.check` with `policy`, `outcome` (`admitted`,
    /// `refused`, `refused_locally`, `unavailable`, `needs_user`, `misconfigured`) and,
    /// for a refusal, `dimension`. At `info` (the default) the span is disabled: entering it
    /// is a flag check, and nothing per refused request is logged.
    pub async fn check(
        &self,
        policy_name: &str,
        algorithm: Option<Algorithm>,
        caller: &Caller<'_>,
    ) -> Result<Admission, Rejection> {
        self.check_then(policy_name, algorithm, caller, None)
            .await
            .map(|(admission, _)| admission)
    }

    /// [`Self::check`], and after an admission `then` in the same Redis call when the
    /// policy is `per_item` (its keys share the partition's slot with `then`'s): the
    /// follow-up's reply comes back with the admission. `None` for it means it did not
    /// run (another scope, the denial cache, a fail-open admission): the caller runs its
    /// script itself.
    pub async fn check_then(
        &self,
        policy_name: &str,
        algorithm: Option<Algorithm>,
        caller: &Caller<'_>,
        then: Option<&Then<'_>>,
    ) -> Result<(Admission, Option<redis::Value>), Rejection> {
        let span = tracing::debug_span!(
            "limiter.check",
            policy = policy_name,
            outcome = tracing::field::Empty,
            dimension = tracing::field::Empty,
        );
        // One `decide` future whatever the level: two (one per branch) would double
        // the size of every future that awaits a check, and refusals copy those.
        let decided = self
            .decide(policy_name, algorithm, caller, then)
            .instrument(span.clone())
            .await;
        if let Err(Rejection::Refused(refusal)) = &decided {
            self.metrics.tally.refusals.refused(
                &refusal.policy.name,
                refusal.dimension(),
                caller.user.map(UserId::get),
                caller.ip.addr(),
                caller.partition.as_ref().and_then(Partition::item),
            );
        }
        if span.is_disabled() {
            return decided;
        }
        let outcome = match &decided {
            Ok(_) => "admitted",
            Err(Rejection::Refused(refusal)) => {
                span.record("dimension", refusal.dimension());
                if refusal.local {
                    "refused_locally"
                } else {
                    "refused"
                }
            }
            Err(Rejection::Unavailable) => "unavailable",
            Err(Rejection::NeedsUser) => "needs_user",
            Err(Rejection::Misconfigured(_)) => "misconfigured",
        };
        // Written with the span's closing line (see `telemetry`).
        span.record("outcome", outcome);
        decided
    }

    /// The decision in its steps: the denial cache's answer, else the backend's, else
    /// the fail mode's.
    async fn decide(
        &self,
        policy_name: &str,
        algorithm: Option<Algorithm>,
        caller: &Caller<'_>,
        then: Option<&Then<'_>>,
    ) -> Result<(Admission, Option<redis::Value>), Rejection> {
        let (enforced, generation) = self.enforced(policy_name)?;
        let policy = &enforced.policy;
        let algorithm = algorithm.unwrap_or(policy.algorithm);
        if !policy.enabled {
            return Ok((unlimited(policy, algorithm), None));
        }
        let (keys, contended) =
            self.keys_unless_denied(&enforced, algorithm, caller, generation)?;
        let probes = if contended {
            // Boxed: waiting on another request's probe is rare, and its future would
            // otherwise enlarge every check's.
            Box::pin(local::consult(
                &self.denials,
                || self.clock.local_us(self.epoch),
                self.probe_timeout,
                &keys,
                generation,
            ))
            .await
            .map_err(|denied| {
                let refusal = Refusal {
                    policy: Arc::clone(policy),
                    algorithm,
                    rule: denied.rule,
                    own_wait_ms: denied.own_wait_ms,
                    longest_wait_ms: denied.longest_wait_ms,
                    local: true,
                };
                refuse_locally(refusal, &enforced)
            })?
        } else {
            Vec::new()
        };
        let sent_us = self.clock.local_us(self.epoch);
        let (now_ms, app_late_us) = self.clock.script_now();
        let member = self.next_member();
        let started = Instant::now();
        let reply = self
            .backend
            .do_limit(LimitRequest {
                algorithm,
                keys: &keys,
                rules: &policy.rules,
                enforced: policy.enforced,
                now_ms,
                member: &member,
                costs: &[],
                // Composed with the caller's follow-up only where all the keys share a
                // slot.
                then: then.filter(|_| policy.scope == Scope::PerItem),
            })
            .await;
        enforced.latency[algorithm as usize].observe(started.elapsed().as_secs_f64());
        match reply {
            Ok((reply, followed)) => {
                // When the waits started: the send, less how far into its millisecond
                // the clock that counted them was.
                let started_us = sent_us - app_late_us - reply.late_us;
                local::learn(
                    &self.denials,
                    &reply.decision,
                    &keys,
                    &[],
                    probes,
                    started_us,
                    generation,
                );
                enforced.decided_in(LimiterMode::Redis);
                let admission = record(&enforced, algorithm, reply.decision)?;
                if admission.delayed_ms > 0 {
                    // The shaper's departure slot: counted from the millisecond its
                    // clock read, like every wait.
                    let slot_us = started_us + admission.delayed_ms as i64 * 1000;
                    self.clock.hold_until(self.epoch, slot_us).await;
                }
                Ok((admission, followed))
            }
            Err(failure) => self.failed(&enforced, algorithm, &keys, &failure),
        }
    }

    /// Decides `ask`: rules its caller matched itself (the edge's descriptors), each with
    /// its key and cost, in the steps of a policy's decision: the denial cache (under
    /// `ask.generation`), else one backend call, all or nothing, else `ask.fail_mode`
    /// (`local`: the fallback limits, weighed by cost). A shaper's delay is the
    /// caller's to keep (`delay_ms` of an admission); nothing here waits for it.
    pub async fn ask(&self, ask: &Ask<'_>) -> Answer {
        let enforced_keys = &ask.keys[..ask.enforced.min(ask.keys.len())];
        let probes = if self.denials.is_enabled() {
            let consulted = local::consult(
                &self.denials,
                || self.clock.local_us(self.epoch),
                self.probe_timeout,
                enforced_keys,
                ask.generation,
            )
            .await;
            match consulted {
                Ok(probes) => probes,
                Err(denied) => {
                    return Answer::Decided {
                        decision: backend::Decision::Refused {
                            rule: denied.rule,
                            retry_after_ms: denied.own_wait_ms as i64,
                            longest_retry_after_ms: denied.longest_wait_ms as i64,
                        },
                        rule_remaining: Vec::new(),
                        by: AnsweredBy::DenialCache,
                    }
                }
            }
        } else {
            Vec::new()
        };
        let sent_us = self.clock.local_us(self.epoch);
        let (now_ms, app_late_us) = self.clock.script_now();
        let member = self.next_member();
        let reply = self
            .backend
            .do_limit(LimitRequest {
                algorithm: ask.algorithm,
                keys: ask.keys,
                rules: ask.rules,
                enforced: ask.enforced,
                now_ms,
                member: &member,
                costs: ask.costs,
                then: None,
            })
            .await;
        match reply {
            Ok((reply, _)) => {
                local::learn(
                    &self.denials,
                    &reply.decision,
                    ask.keys,
                    ask.costs,
                    probes,
                    sent_us - app_late_us - reply.late_us,
                    ask.generation,
                );
                Answer::Decided {
                    decision: reply.decision,
                    rule_remaining: reply.rule_remaining,
                    by: AnsweredBy::Redis,
                }
            }
            Err(failure) => {
                let local = || {
                    let now_ms = self.clock.local_us(self.epoch).max(0) as u64 / 1_000;
                    let shares: Vec<fallback_limits::Share> = ask.rules[..ask.enforced]
                        .iter()
                        .map(|rule| {
                            let (threshold, window_ms) =
                                fallback_limits::limit(rule, ask.algorithm);
                            fallback_limits::Share::of(threshold, window_ms, self.peers.alive())
                        })
                        .collect();
                    let keys: Vec<&str> = enforced_keys.iter().map(String::as_str).collect();
                    let costs = &ask.costs[..ask.costs.len().min(ask.enforced)];
                    self.fallback
                        .decide(ask.name, &keys, &shares, costs, now_ms)
                };
                match self.failures.fail_over(
                    None,
                    ask.name,
                    ask.fail_mode,
                    &failure.to_string(),
                    local,
                ) {
                    Failover::Admit => Answer::FailedOpen,
                    Failover::Refuse => Answer::FailedClosed,
                    Failover::Local(verdict) => Answer::Decided {
                        decision: verdict.into(),
                        rule_remaining: Vec::new(),
                        by: AnsweredBy::FallbackLimits,
                    },
                }
            }
        }
    }

    /// A request id unique across instances (the sliding log's member): this
    /// instance's tag and its next sequence number.
    fn next_member(&self) -> String {
        format!(
            "{:016x}{:x}",
            self.instance_tag,
            self.sequence.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// The policy in force under `policy_name`, and the generation of the rules.
    fn enforced(&self, policy_name: &str) -> Result<(Arc<Enforced>, u64), Rejection> {
        let installed = self.installed.load();
        let enforced = installed
            .policies
            .get(policy_name)
            .cloned()
            .ok_or_else(|| Rejection::Misconfigured(format!("unknown policy {policy_name:?}")))?;
        Ok((enforced, installed.generation))
    }

    /// The caller's keys, rule by rule, unless the denial cache already refuses one, and
    /// whether another request is probing one of them.
    ///
    /// The first live denial refuses at once, before the remaining keys are even
    /// built: the cheapest answer of a stampede. Its wait is that rule's own, which is
    /// never later than the longest Redis would give.
    fn keys_unless_denied(
        &self,
        enforced: &Enforced,
        algorithm: Algorithm,
        caller: &Caller<'_>,
        generation: u64,
    ) -> Result<(Vec<String>, bool), Rejection> {
        let policy = &enforced.policy;
        let now = self.clock.local_us(self.epoch);
        let mut keys = Vec::with_capacity(policy.rules.len());
        let mut contended = false;
        for (index, rule) in policy.rules.iter().enumerate() {
            let key = keys::redis_key(&self.prefix, policy, algorithm, rule, caller)?;
            match self.denials.seen(&key, now, generation) {
                Seen::Refused { wait_us } => {
                    let wait = whole_ms(wait_us);
                    return Err(refuse_locally(
                        Refusal {
                            policy: Arc::clone(policy),
                            algorithm,
                            rule: index,
                            own_wait_ms: wait,
                            longest_wait_ms: wait,
                            local: true,
                        },
                        enforced,
                    ));
                }
                Seen::Probing(_) | Seen::Expired => contended = true,
                Seen::Unknown => {}
            }
            keys.push(key);
        }
        Ok((keys, contended))
    }

    /// The backend gave no decision: the policy's fail mode answers.
    fn failed(
        &self,
        enforced: &Enforced,
        algorithm: Algorithm,
        keys: &[String],
        failure: &BackendError,
    ) -> Result<(Admission, Option<redis::Value>), Rejection> {
        let policy = &enforced.policy;
        let local = || {
            let now_ms = self.clock.local_us(self.epoch).max(0) as u64 / 1_000;
            fallback_limits::decide_policy(
                &self.fallback,
                enforced,
                algorithm,
                keys,
                self.peers.alive(),
                now_ms,
            )
        };
        let failure = failure.to_string();
        match self.failures.fail_over(
            Some(enforced),
            &policy.name,
            policy.fail_mode,
            &failure,
            local,
        ) {
            Failover::Admit => Ok((unlimited(policy, algorithm), None)),
            Failover::Refuse => Err(Rejection::Unavailable),
            Failover::Local(decided) => decided.map(|admission| (admission, None)),
        }
    }
}

/// An admission that counted nothing: a disabled policy's, or an open one's without
/// Redis.
fn unlimited(policy: &Arc<Policy>, algorithm: Algorithm) -> Admission {
    Admission {
        policy: Arc::clone(policy),
        algorithm,
        quota_left: None,
        delayed_ms: 0,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, VecDeque};
    use std::future::Future;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::backend::{BackendError, Cost, Decision, LimitBackend, LimitRequest, Reply};
    use super::policy::{KeySource, PolicyConfig, RuleConfig};
    use super::{
        Algorithm, Answer, AnsweredBy, Ask, FailMode, Limiter, LimiterSettings, Rejection, Scope,
    };
    use crate::metrics::Metrics;

    /// A backend that never decides, as Redis during an outage, and counts the asks.
    #[derive(Default)]
    struct Unanswering(AtomicUsize);

    impl LimitBackend for Unanswering {
        fn do_limit<'a>(
            &'a self,
            _: LimitRequest<'a>,
        ) -> impl Future<Output = Result<(Reply, Option<redis::Value>), BackendError>> + Send + 'a
        {
            self.0.fetch_add(1, Ordering::Relaxed);
            std::future::ready(Err(BackendError::UnexpectedReply))
        }
    }

    /// A backend that answers what the test queued, in turn, and counts the asks and
    /// the costs each was sent.
    #[derive(Default)]
    struct Scripted {
        replies: Mutex<VecDeque<Decision>>,
        costs: Mutex<Vec<Vec<u32>>>,
    }

    impl Scripted {
        fn answering(decisions: impl IntoIterator<Item = Decision>) -> Self {
            Self {
                replies: Mutex::new(decisions.into_iter().collect()),
                costs: Mutex::default(),
            }
        }

        fn asks(&self) -> usize {
            self.costs.lock().unwrap().len()
        }
    }

    impl LimitBackend for Scripted {
        fn do_limit<'a>(
            &'a self,
            request: LimitRequest<'a>,
        ) -> impl Future<Output = Result<(Reply, Option<redis::Value>), BackendError>> + Send + 'a
        {
            let hits = request.costs.iter().map(|cost| cost.hits()).collect();
            self.costs.lock().unwrap().push(hits);
            let decision = self.replies.lock().unwrap().pop_front();
            std::future::ready(
                decision
                    .ok_or(BackendError::UnexpectedReply)
                    .map(|decision| {
                        let rule_remaining = match decision {
                            Decision::Admitted { remaining, .. } => vec![remaining, 9],
                            Decision::Refused { .. } => Vec::new(),
                        };
                        let reply = Reply {
                            decision,
                            late_us: 0,
                            rule_remaining,
                        };
                        (reply, None)
                    }),
            )
        }
    }

    /// A limiter on `backend` with one fixed-window policy `p` of two rules (5 and 100
    /// per minute), whose rules the asks below borrow.
    fn limiter_on<B: LimitBackend>(backend: B) -> Limiter<B> {
        let config = PolicyConfig {
            algorithm: Algorithm::FixedWindow,
            fail_mode: FailMode::Local,
            enabled: true,
            scope: Scope::Global,
            rules: vec![
                RuleConfig::new("ip", KeySource::Ip, 60_000, 5, "slow down"),
                RuleConfig::new("all", KeySource::Literal("all".into()), 60_000, 100, "busy"),
            ],
        };
        let settings = LimiterSettings {
            policies: BTreeMap::from([("p".to_string(), config)]),
            ..LimiterSettings::default()
        };
        let metrics = Arc::new(Metrics::new().expect("metrics"));
        Limiter::with_backend(
            backend,
            "test",
            Duration::from_millis(250),
            &settings,
            metrics,
        )
        .expect("valid policies")
    }

    /// Asks `limiter` under policy `p`'s rules for the keys `rls:a` and `rls:all`, with
    /// `hits` under the first rule and 1 under the second, in `generation`.
    async fn ask<B: LimitBackend>(limiter: &Limiter<B>, hits: u64, generation: u64) -> Answer {
        let policy = limiter.policy("p").expect("policy p");
        let keys = ["rls:a".to_string(), "rls:all".to_string()];
        let costs = [Cost::new(hits).expect("a cost"), Cost::ONE];
        limiter
            .ask(&Ask {
                name: "rls:test",
                generation,
                algorithm: Algorithm::FixedWindow,
                fail_mode: FailMode::Local,
                rules: &policy.rules,
                enforced: policy.enforced,
                keys: &keys,
                costs: &costs,
            })
            .await
    }

    fn refused(wait_ms: i64) -> Decision {
        Decision::Refused {
            rule: 0,
            retry_after_ms: wait_ms,
            longest_retry_after_ms: wait_ms,
        }
    }

    fn admitted(remaining: i64) -> Decision {
        Decision::Admitted {
            tightest: 0,
            remaining,
            next_slot_ms: if remaining == 0 { 30_000 } else { 0 },
            delay_ms: 0,
            near_limit: 0,
            shadow_refused: 0,
        }
    }

    #[tokio::test]
    async fn a_refused_cost_above_one_teaches_the_denial_cache_nothing() {
        let limiter = limiter_on(Scripted::answering([refused(30_000), admitted(2)]));
        let expensive = ask(&limiter, 5, 0).await;
        assert_eq!(
            expensive,
            Answer::Decided {
                decision: refused(30_000),
                rule_remaining: vec![],
                by: AnsweredBy::Redis
            }
        );
        // A cost of 5 refused says nothing of a cost of 1: Redis is asked, and admits.
        let cheap = ask(&limiter, 1, 0).await;
        assert_eq!(
            cheap,
            Answer::Decided {
                decision: admitted(2),
                rule_remaining: vec![2, 9],
                by: AnsweredBy::Redis
            }
        );
        assert_eq!(
            *limiter.backend.costs.lock().unwrap(),
            [vec![5, 1], vec![1, 1]]
        );
    }

    #[tokio::test]
    async fn a_refused_cost_of_one_is_answered_again_locally_for_any_cost_in_its_generation() {
        let limiter = limiter_on(Scripted::answering([refused(30_000), admitted(4)]));
        assert!(matches!(
            ask(&limiter, 1, 7).await,
            Answer::Decided {
                by: AnsweredBy::Redis,
                ..
            }
        ));
        for hits in [1, 3] {
            let Answer::Decided {
                decision:
                    Decision::Refused {
                        rule,
                        retry_after_ms,
                        ..
                    },
                by: AnsweredBy::DenialCache,
                ..
            } = ask(&limiter, hits, 7).await
            else {
                panic!("cost {hits}: not refused locally");
            };
            // Never later than Redis's own wait, counted from the send.
            assert!(rule == 0 && (29_000..=30_000).contains(&retry_after_ms));
        }
        assert_eq!(limiter.backend.asks(), 1, "answered locally");
        // A new generation (the domain edited: its limit raised) retires the denial.
        assert!(matches!(
            ask(&limiter, 1, 8).await,
            Answer::Decided {
                by: AnsweredBy::Redis,
                decision: Decision::Admitted { .. },
                ..
            }
        ));
        assert_eq!(limiter.backend.asks(), 2);
    }

    #[tokio::test]
    async fn an_admission_of_any_cost_that_fills_a_rule_refuses_the_next_locally() {
        let limiter = limiter_on(Scripted::answering([admitted(0)]));
        assert!(matches!(
            ask(&limiter, 4, 0).await,
            Answer::Decided {
                by: AnsweredBy::Redis,
                ..
            }
        ));
        // Remaining counts hits of cost 1: 0 left refuses every cost until the next slot.
        assert!(matches!(
            ask(&limiter, 1, 0).await,
            Answer::Decided {
                by: AnsweredBy::DenialCache,
                decision: Decision::Refused { rule: 0, .. },
                ..
            }
        ));
        assert_eq!(limiter.backend.asks(), 1);
    }

    #[tokio::test]
    async fn without_redis_the_fallback_weighs_each_rule_by_its_cost() {
        let limiter = limiter_on(Unanswering::default());
        let mut answers = Vec::new();
        for hits in [3, 3, 9, 2, 1] {
            answers.push(match ask(&limiter, hits, 0).await {
                Answer::Decided {
                    decision:
                        Decision::Admitted {
                            tightest,
                            remaining,
                            ..
                        },
                    by: AnsweredBy::FallbackLimits,
                    ..
                } => format!("{hits}: admitted, rule {tightest} left {remaining}"),
                Answer::Decided {
                    decision: Decision::Refused { rule, .. },
                    by: AnsweredBy::FallbackLimits,
                    ..
                } => format!("{hits}: refused by rule {rule}"),
                other => format!("{hits}: {other:?}"),
            });
        }
        // The share of 5 (one instance): 3 fit, 3 more do not (nor 9, ever), and the
        // refusals wrote nothing, so 2 still fit; then nothing.
        assert_eq!(
            answers,
            [
                "3: admitted, rule 0 left 2",
                "3: refused by rule 0",
                "9: refused by rule 0",
                "2: admitted, rule 0 left 0",
                "1: refused by rule 0",
            ]
        );
        assert_eq!(
            limiter.backend.0.load(Ordering::Relaxed),
            5,
            "every ask tried Redis"
        );
    }

    #[tokio::test]
    async fn a_failing_backend_leaves_each_policy_to_its_fail_mode() {
        let mode_names = [
            (FailMode::Open, "open"),
            (FailMode::Closed, "closed"),
            (FailMode::Local, "local"),
        ];
        let policies: BTreeMap<String, PolicyConfig> = mode_names
            .iter()
            .map(|&(fail_mode, name)| {
                let rule = RuleConfig::new("ip", KeySource::Ip, 60_000, 2, "slow down");
                let config = PolicyConfig {
                    algorithm: Algorithm::FixedWindow,
                    fail_mode,
                    enabled: true,
                    scope: Scope::Global,
                    rules: vec![rule],
                };
                (name.to_string(), config)
            })
            .collect();
        let settings = LimiterSettings {
            policies,
            ..LimiterSettings::default()
        };
        let metrics = Arc::new(Metrics::new().expect("metrics"));
        let limiter = Limiter::with_backend(
            Unanswering::default(),
            "test",
            Duration::from_millis(250),
            &settings,
            Arc::clone(&metrics),
        )
        .expect("valid policies");
        let caller = super::keys::tests::caller(None);
        let mut answers = Vec::new();
        for (_, name) in mode_names {
            for _ in 0..3 {
                answers.push(match limiter.check(name, None, &caller).await {
                    Ok(admission) => format!(
                        "{name}: admitted, left {:?}",
                        admission.quota_left.map(|left| left.remaining)
                    ),
                    Err(Rejection::Refused(refusal)) => {
                        format!("{name}: refused by rule {}", refusal.rule)
                    }
                    Err(other) => format!("{name}: {other}"),
                });
            }
        }
        assert_eq!(
            answers,
            [
                "open: admitted, left None",
                "open: admitted, left None",
                "open: admitted, left None",
                "closed: the rate limiter is unavailable",
                "closed: the rate limiter is unavailable",
                "closed: the rate limiter is unavailable",
                // This instance's share of 2 (one instance): 2, then refused.
                "local: admitted, left Some(1)",
                "local: admitted, left Some(0)",
                "local: refused by rule 0",
            ]
        );
        assert_eq!(
            limiter.backend.0.load(Ordering::Relaxed),
            9,
            "every check asked"
        );
        assert_eq!(
            metrics.limiter_fail_open.with_label_values(&["open"]).get(),
            3
        );
        assert_eq!(
            metrics
                .limiter_fail_closed
                .with_label_values(&["closed"])
                .get(),
            3
        );
        for (_, name) in mode_names {
            let mode = |mode: &str| metrics.limiter_mode.with_label_values(&[name, mode]).get();
            assert_eq!((mode("redis"), mode(name)), (0, 1), "{name}");
        }
    }
}
