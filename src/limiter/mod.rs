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
//! - [`denial`]: refusals Redis made, answered again locally until they expire; `local`
//!   consults and teaches it around each decision.
//! - [`fallback_limits`]: the limits a policy failing `local` enforces in process while Redis
//!   cannot be asked, each rule at this instance's share; [`peers`] counts the
//!   instances that share it; [`key_table`] bounds what is kept per key in process.
//! - `installed` (the policies in force with their metric series), `outcome` (what a
//!   check answers), `burst_log` (one warning per outage, not per request).
//!
//! Several instances share one truth: all state lives in Redis. The process keeps the
//! denial cache, which repeats refusals Redis made and that cannot have changed yet,
//! so it never admits what Redis would refuse nor refuses what Redis would admit; and,
//! only while Redis is away, the fallback limits' counts.

pub mod backend;
mod burst_log;
pub mod clock;
pub mod denial;
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

use crate::metrics::{Metrics, RedisPurpose};
use crate::store::RedisStore;
use backend::ScriptBackend;
pub use backend::{FollowUp, Then};
pub(crate) use burst_log::BurstLog;
pub use clock::{Clock, ManualClock};
use denial::{DenialCache, Seen};
use fallback_limits::FallbackLimits;
use installed::Installed;
pub use keys::{Caller, Partition, Scope};
use local::whole_ms;
use outcome::{record, refuse_locally};
pub use outcome::{Admission, QuotaLeft, Refusal, Rejection};
use peers::Peers;
pub use policy::{Algorithm, FailMode, LimiterSettings, Policy, PolicySet};

use crate::vocabulary::LimiterMode;

/// The rate limiter: decides a request against a policy in one script call, and what
/// Redis's absence means for it (its fail mode). One per process, shared by every worker.
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
    /// Counts for the policies failing `local`, kept only while Redis is away.
    fallback: FallbackLimits,
    fallback_log: BurstLog,
    peers: Peers,
    heartbeat: Duration,
}

impl Limiter {
    /// The limiter with `settings`' policies; refuses a policy that fails its checks.
    pub fn new(
        redis: RedisStore,
        settings: &LimiterSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Self, policy::PolicyError> {
        let policies = PolicySet::parse(&settings.policies)?;
        let instance_tag = uuid::Uuid::new_v4().as_u64_pair().0;
        Ok(Self {
            redis,
            backend: ScriptBackend::default(),
            installed: ArcSwap::from_pointee(Installed::new(policies, 0, &metrics)),
            clock: Clock::from_source(settings.clock),
            denials: DenialCache::new(settings.denial_cache_slots),
            epoch: Instant::now(),
            instance_tag,
            sequence: AtomicU64::new(0),
            fail_open_log: BurstLog::new("failing open"),
            fail_closed_log: BurstLog::new("failing closed"),
            fallback: FallbackLimits::new(settings.fallback_keys),
            fallback_log: BurstLog::new("deciding locally (fallback limits)"),
            peers: Peers::new(
                instance_tag,
                settings.fleet_floor,
                metrics.limiter_instances.clone(),
            ),
            heartbeat: Duration::from_millis(settings.heartbeat_ms.max(1)),
            metrics,
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

    /// The algorithms' scripts, for callers that compose a follow-up with them.
    pub fn backend(&self) -> &ScriptBackend {
        &self.backend
    }

    /// Beats into Redis every heartbeat period, forever, so the fallback limits know
    /// how many instances share each threshold (a failed beat keeps the last count).
    pub async fn beat(self: Arc<Self>) {
        let period = self.heartbeat;
        crate::background::every("limiter heartbeat", period, move || {
            let limiter = Arc::clone(&self);
            async move { limiter.peers.beat(&limiter.redis, period).await }
        })
        .await
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
        self.note_mode(policy_name, LimiterMode::Local);
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

    async fn decide(
        &self,
        policy_name: &str,
        algorithm: Option<Algorithm>,
        caller: &Caller<'_>,
        then: Option<&Then<'_>>,
    ) -> Result<(Admission, Option<redis::Value>), Rejection> {
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
            return Ok((
                Admission {
                    policy: Arc::clone(policy),
                    algorithm,
                    quota_left: None,
                    delayed_ms: 0,
                },
                None,
            ));
        }
        // The first live denial refuses at once, before the remaining keys are even
        // built: the cheapest answer of a stampede. Its wait is that rule's own, which
        // is never later than the longest Redis would give.
        let now = self.clock.local_us(self.epoch);
        let mut keys = Vec::with_capacity(policy.rules.len());
        let mut contended = false;
        for (index, rule) in policy.rules.iter().enumerate() {
            let key = keys::redis_key(self.redis.prefix(), policy, algorithm, rule, caller)?;
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
                        &enforced,
                    ));
                }
                Seen::Probing(_) | Seen::Expired => contended = true,
                Seen::Unknown => {}
            }
            keys.push(key);
        }
        let probes = if contended {
            // Boxed: waiting on another request's probe is rare, and its future would
            // otherwise enlarge every check's.
            Box::pin(local::consult(
                &self.denials,
                || self.clock.local_us(self.epoch),
                self.redis.timeout(RedisPurpose::Limiter),
                &enforced,
                algorithm,
                &keys,
                generation,
            ))
            .await
            .map_err(|refusal| refuse_locally(refusal, &enforced))?
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
        let rules = policy.rules.len();
        let started = Instant::now();
        // Composed with the caller's follow-up only where all the keys share a slot.
        let reply = match then.filter(|_| policy.scope == Scope::PerItem) {
            None => {
                let invocation = self.backend.invocation(
                    algorithm,
                    &keys,
                    &policy.rules,
                    policy.enforced,
                    now_ms,
                    &member,
                );
                self.redis
                    .call::<Vec<i64>>(RedisPurpose::Limiter, &invocation)
                    .await
                    .map(|raw| backend::decode(&raw, rules).map(|reply| (reply, None)))
            }
            Some(then) => {
                let invocation = ScriptBackend::invocation_then(
                    algorithm,
                    &keys,
                    &policy.rules,
                    policy.enforced,
                    now_ms,
                    &member,
                    then,
                );
                self.redis
                    .call::<Vec<redis::Value>>(RedisPurpose::Limiter, &invocation)
                    .await
                    .map(|raw| backend::decode_with_follow_up(raw, rules))
            }
        };
        enforced.latency[algorithm as usize].observe(started.elapsed().as_secs_f64());

        let failure = match reply {
            Ok(Some((reply, followed))) => {
                // When the waits started: the send, less how far into its millisecond
                // the clock that counted them was.
                let started_us = sent_us - app_late_us - reply.late_us;
                local::learn(
                    &self.denials,
                    &reply.decision,
                    &keys,
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
                return Ok((admission, followed));
            }
            Ok(None) => {
                self.metrics.redis_error(RedisPurpose::Limiter);
                "unexpected limiter script reply".to_string()
            }
            Err(e) => e.to_string(),
        };
        match policy.fail_mode {
            FailMode::Open => {
                enforced.decided_in(LimiterMode::Open);
                enforced.fail_open.inc();
                self.fail_open_log.warn(&policy.name, &failure);
                Ok((
                    Admission {
                        policy: Arc::clone(policy),
                        algorithm,
                        quota_left: None,
                        delayed_ms: 0,
                    },
                    None,
                ))
            }
            FailMode::Closed => {
                enforced.decided_in(LimiterMode::Closed);
                enforced.fail_closed.inc();
                self.fail_closed_log.warn(&policy.name, &failure);
                Err(Rejection::Unavailable)
            }
            FailMode::Local => {
                self.fallback_log.warn(&policy.name, &failure);
                let now_ms = self.clock.local_us(self.epoch).max(0) as u64 / 1_000;
                fallback_limits::decide_policy(
                    &self.fallback,
                    &enforced,
                    algorithm,
                    &keys,
                    self.peers.alive(),
                    now_ms,
                )
                .map(|admission| (admission, None))
            }
        }
    }
}
