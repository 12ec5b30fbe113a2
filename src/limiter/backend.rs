//! The Redis side: one Lua script per algorithm, one round trip per decision.
//!
//! Scripts are compiled into the binary from `lua/` and wrapped in `redis::Script`,
//! which sends EVALSHA and falls back to EVAL (loading the script) after a Redis
//! restart.
//!
//! # The contract every algorithm's script keeps
//!
//! - `KEYS[i]`: rule i's state (all of a policy's keys share one hash tag).
//! - `ARGV[1]`: now in ms, or `""` to read the Redis clock (`TIME`); `ARGV[2]`: a
//!   request id unique across instances (the sliding log's member; others ignore it);
//!   `ARGV[3]`: `m`, the number of enforced rules: rules `1..m` are enforced, the rest
//!   are shadow rules. Then each rule's parameters, as many per rule as the algorithm
//!   takes ([`params`]): `p` per rule, `n` rules. Then, optionally, each rule's cost:
//!   `ARGV[3 + p·n + i]` is rule i's ([`Cost`]); a missing one is 1, so the policies'
//!   requests (one hit each) send none.
//! - A request of cost `c` counts `c` hits under a rule: a window admits it when its
//!   count plus `c` is within the threshold, a bucket when it holds `c` tokens, GCRA and
//!   the shaper advance by `c` emission intervals. A cost above a rule's whole quota is
//!   refused by that rule, with a wait of at least 1 ms that each script's header states
//!   (a retry after it is refused again). Shadow rules weigh their cost too.
//! - All-or-nothing: a request is admitted only if every enforced rule admits it, and
//!   then every enforced rule records it. A refusal writes nothing but the TTL
//!   extension its script's header documents (a rule edit that lengthened what a key
//!   must keep).
//! - Shadow rules are decided only after the enforced rules admitted; each records the
//!   request as it would if enforced (if it has room) and reports whether it would have
//!   refused. A shadow rule is never the refusing rule, so the denial cache never
//!   learns from one.
//! - Replies: admitted `{1, t, remaining, next, late, delay, near, shadow, left_1..
//!   left_n}`, refused `{0, r, wait, longest, late}` (see [`Decision`]; `late` is the µs
//!   past the millisecond the Redis clock read, 0 with an app clock; `left_i` what rule
//!   i has left after this request in hits of cost 1, a shadow rule's as if enforced and
//!   0 if it would have refused: [`Reply::rule_remaining`]). `remaining` and `next` are
//!   in hits of cost 1 too, whatever the request's cost: a rule left at 0 refuses every
//!   cost until `next`, which is what lets the denial cache learn from it. With no
//!   enforced rule (`m` = 0: an edge request whose descriptors match shadow rules only)
//!   `t` is 0, read as nothing left to learn ([`decode`]). Every wait is exact for
//!   the state it read: until it ends, only admissions change a key, and they only
//!   make it later. That is what lets the denial cache repeat a refusal.
//! - A rule edit is read against state written under the old rule; each script says
//!   how it converts (the token bucket keeps tokens, GCRA and the shaper keep time,
//!   the counters keep counts).

use std::future::Future;
use std::sync::Arc;

use redis::{Script, ScriptInvocation};

use super::policy::{Algorithm, Rule};
use crate::metrics::{Metrics, RedisPurpose};
use crate::store::redis_store::RedisCallError;
use crate::store::RedisStore;

/// What decides a request against the counts every instance shares: the Redis scripts
/// ([`RedisBackend`]) in production, a double in a test. It is envoy ratelimit's
/// `RateLimitCache` cut to its `DoLimit`: its `Flush` waits for writes a cache makes after
/// answering, and a script writes nothing after its reply.
///
/// The limiter is generic over it rather than holding a `dyn`: the refusal path pays
/// nothing for the seam.
pub trait LimitBackend: Send + Sync + 'static {
    /// Decides `request`, all or nothing, in one call (the contract above), and runs its
    /// follow-up after an admission where the backend can: the follow-up's reply comes
    /// back with the decision, `None` when it did not run.
    fn do_limit<'a>(
        &'a self,
        request: LimitRequest<'a>,
    ) -> impl Future<Output = Result<(Reply, Option<redis::Value>), BackendError>> + Send + 'a;
}

/// One decision to ask a backend for.
pub struct LimitRequest<'a> {
    /// The algorithm deciding (the policy's, or the one a request chose).
    pub algorithm: Algorithm,
    /// `keys[i]` is `rules[i]`'s.
    pub keys: &'a [String],
    /// The policy's rules, enforced ones first.
    pub rules: &'a [Rule],
    /// The first `enforced` rules are enforced, the rest shadow rules.
    pub enforced: usize,
    /// Now in ms on the app's clock; `None` to read the store's.
    pub now_ms: Option<i64>,
    /// A request id unique across instances (the sliding log's member).
    pub member: &'a str,
    /// How many hits the request counts for under each rule (envoy's per-descriptor
    /// `hits_addend`): `costs[i]` is `rules[i]`'s; empty means one hit under every rule.
    pub costs: &'a [Cost],
    /// A script to run in the same call after an admission; the limiter passes one only
    /// where it shares the keys' slot (a `per_item` policy).
    pub then: Option<&'a Then<'a>>,
}

/// How many hits a request counts for under a rule (envoy's `hits_addend`): 1 to
/// [`Cost::MAX`]. A cost above a rule's whole quota is refused by it, never admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cost(u32);

impl Cost {
    /// One request, one hit.
    pub const ONE: Self = Self(1);

    /// The most hits one request may count for under one rule.
    pub const MAX: u32 = 1_000_000;

    /// `hits`, when it is 1 to [`Cost::MAX`].
    pub fn new(hits: u64) -> Option<Self> {
        u32::try_from(hits)
            .ok()
            .filter(|hits| (1..=Self::MAX).contains(hits))
            .map(Self)
    }

    /// The hits, for a backend that weighs them.
    pub fn hits(self) -> u32 {
        self.0
    }
}

/// Why a backend gave no decision: the policy's fail mode answers instead.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The call failed or timed out (already counted by `RedisStore::call`).
    #[error(transparent)]
    Call(#[from] RedisCallError),
    /// An answer that is not a decision (counted as a Redis error of the limiter).
    #[error("unexpected limiter script reply")]
    UnexpectedReply,
}

/// The scripts on the deployment's Redis: the backend of every running limiter.
pub struct RedisBackend {
    redis: RedisStore,
    scripts: ScriptBackend,
    metrics: Arc<Metrics>,
}

impl RedisBackend {
    /// The scripts, called on `redis`.
    pub fn new(redis: RedisStore, metrics: Arc<Metrics>) -> Self {
        Self {
            redis,
            scripts: ScriptBackend::default(),
            metrics,
        }
    }

    /// The store it calls (the limiter's heartbeat beats into it too).
    pub fn redis(&self) -> &RedisStore {
        &self.redis
    }

    /// The compiled scripts.
    pub fn scripts(&self) -> &ScriptBackend {
        &self.scripts
    }
}

impl LimitBackend for RedisBackend {
    async fn do_limit<'a>(
        &'a self,
        request: LimitRequest<'a>,
    ) -> Result<(Reply, Option<redis::Value>), BackendError> {
        let LimitRequest {
            algorithm,
            keys,
            rules,
            enforced,
            now_ms,
            member,
            costs,
            then,
        } = request;
        let decided = match then {
            None => {
                let invocation = self
                    .scripts
                    .invocation(algorithm, keys, rules, enforced, now_ms, member, costs);
                let raw = self
                    .redis
                    .call::<Vec<i64>>(RedisPurpose::Limiter, &invocation)
                    .await?;
                decode(raw, rules.len()).map(|reply| (reply, None))
            }
            Some(then) => {
                let invocation = ScriptBackend::invocation_then(
                    algorithm, keys, rules, enforced, now_ms, member, costs, then,
                );
                let raw = self
                    .redis
                    .call::<Vec<redis::Value>>(RedisPurpose::Limiter, &invocation)
                    .await?;
                decode_with_follow_up(raw, rules.len())
            }
        };
        decided.ok_or_else(|| {
            self.metrics.redis_error(RedisPurpose::Limiter);
            BackendError::UnexpectedReply
        })
    }
}

/// One compiled script per algorithm (indexed by `Algorithm as usize`).
pub struct ScriptBackend {
    scripts: [Script; Algorithm::ALL.len()],
}

/// What a script answered (see the reply format in the scripts' headers), with rule
/// indexes 0-based, and how late in its millisecond the script's clock read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// What the script decided, and for which rule.
    pub decision: Decision,
    /// µs past the millisecond the Redis clock read (0 when the app passed the time):
    /// every wait ends this much sooner after the call than it reads.
    pub late_us: i64,
    /// After an admission, what each rule has left (`rule_remaining[i]` is rule i's, a
    /// shadow rule's as if enforced, 0 where it would have refused); empty after a
    /// refusal. The script's own reply vector, its first eight values drained: no
    /// allocation of its own, and none at all on a refusal. The policies' path ignores
    /// it (their headers show the tightest rule only).
    pub rule_remaining: Vec<i64>,
}

/// The decision itself: exactly what the response headers and the denial cache need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Every enforced rule admitted and recorded the request. `tightest` is the
    /// enforced rule with the fewest requests left (the first on ties), `remaining` that
    /// count after this one; when that is 0, `next_slot_ms` is how long until `tightest`
    /// admits again (this request took its last slot), else 0.
    Admitted {
        /// Index of the rule with the least left.
        tightest: usize,
        /// What it has left after this request.
        remaining: i64,
        /// When `remaining` is 0, ms until it admits again; else 0.
        next_slot_ms: i64,
        /// How long the answer waits for its departure slot (the shaper; 0 for the
        /// others).
        delay_ms: i64,
        /// Bit `i`: rule `i` is left above 80 % of its quota used (envoy's
        /// `near_limit`).
        near_limit: u32,
        /// Bit `i`: shadow rule `i` would have refused.
        shadow_refused: u32,
    },
    /// Nothing was written. `rule` is the first refusing rule and `retry_after_ms` its
    /// own wait; `longest_retry_after_ms` is the longest wait among the refusing rules:
    /// only then would all of them admit.
    Refused {
        /// Index of the first refusing rule.
        rule: usize,
        /// Its own wait, in ms (≥ 1).
        retry_after_ms: i64,
        /// The longest wait among the refusing rules, in ms.
        longest_retry_after_ms: i64,
    },
}

/// The script deciding `algorithm`.
pub fn source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::SlidingWindow => include_str!("../../lua/sliding_window.lua"),
        Algorithm::TokenBucket => include_str!("../../lua/token_bucket.lua"),
        Algorithm::FixedWindow => include_str!("../../lua/fixed_window.lua"),
        Algorithm::SlidingWindowCounter => include_str!("../../lua/sliding_window_counter.lua"),
        Algorithm::Gcra => include_str!("../../lua/gcra.lua"),
        Algorithm::LeakyBucket => include_str!("../../lua/leaky_bucket.lua"),
    }
}

impl Default for ScriptBackend {
    fn default() -> Self {
        Self {
            scripts: Algorithm::ALL.map(|algorithm| Script::new(source(algorithm))),
        }
    }
}

/// A caller's script that runs in the same call as a decision, only when the decision
/// admitted: one round trip instead of two, where the keys allow it (a per-partition
/// policy, whose keys share the partition's slot with the caller's own keys).
///
/// Each algorithm's script and the caller's are composed into one: both bodies become
/// functions of their own `KEYS` and `ARGV`, and the composed script splits its keys and
/// arguments between them (their counts are its last two arguments). It answers
/// `{decision}` or `{decision, follow_up_reply}`, so a refusal still writes nothing.
pub struct FollowUp {
    scripts: [Script; Algorithm::ALL.len()],
}

impl FollowUp {
    /// Composes `source_code` (a script with its own `KEYS` and `ARGV`) with each
    /// algorithm's script, once, at start-up.
    pub fn new(source_code: &str) -> Self {
        Self {
            scripts: Algorithm::ALL
                .map(|algorithm| Script::new(&compose(source(algorithm), source_code))),
        }
    }

    fn script(&self, algorithm: Algorithm) -> &Script {
        &self.scripts[algorithm as usize]
    }
}

fn compose(limiter: &str, follow_up: &str) -> String {
    format!(
        "local nk, na = tonumber(ARGV[#ARGV - 1]), tonumber(ARGV[#ARGV])\n\
         local function slice(t, from, to)\n\
           local r = {{}}\n\
           for i = from, to do r[#r + 1] = t[i] end\n\
           return r\n\
         end\n\
         local decision = (function(KEYS, ARGV)\n{limiter}\nend)(slice(KEYS, 1, nk), slice(ARGV, 1, na))\n\
         if decision[1] ~= 1 then return {{decision}} end\n\
         local followed = (function(KEYS, ARGV)\n{follow_up}\nend)(slice(KEYS, nk + 1, #KEYS), slice(ARGV, na + 1, #ARGV - 2))\n\
         return {{decision, followed}}\n"
    )
}

impl ScriptBackend {
    /// The SHA1 Redis knows a script by (for `redis-benchmark` and `SCRIPT EXISTS`).
    pub fn sha(&self, algorithm: Algorithm) -> &str {
        self.script(algorithm).get_hash()
    }

    fn script(&self, algorithm: Algorithm) -> &Script {
        &self.scripts[algorithm as usize]
    }

    /// The script call deciding `rules` (`keys[i]` belongs to `rules[i]`; the first
    /// `enforced` are enforced, the rest shadow rules); send it with
    /// `RedisStore::call` and read the reply with [`decode`].
    #[allow(clippy::too_many_arguments)] // The contract's arguments, one each.
    pub fn invocation<'a>(
        &'a self,
        algorithm: Algorithm,
        keys: &[String],
        rules: &[Rule],
        enforced: usize,
        now_ms: Option<i64>,
        member: &str,
        costs: &[Cost],
    ) -> ScriptInvocation<'a> {
        let mut invocation = self.script(algorithm).prepare_invoke();
        for key in keys {
            invocation.key(key.as_str());
        }
        push_args(
            &mut invocation,
            algorithm,
            rules,
            enforced,
            now_ms,
            member,
            costs,
        );
        invocation
    }

    /// The same decision with `then` composed after it (see [`FollowUp`]); read the
    /// reply with [`decode_with_follow_up`].
    #[allow(clippy::too_many_arguments)] // The contract's arguments, one each.
    pub fn invocation_then<'a>(
        algorithm: Algorithm,
        keys: &[String],
        rules: &[Rule],
        enforced: usize,
        now_ms: Option<i64>,
        member: &str,
        costs: &[Cost],
        then: &Then<'a>,
    ) -> ScriptInvocation<'a> {
        let mut invocation = then.script.script(algorithm).prepare_invoke();
        for key in keys.iter().chain(&then.keys) {
            invocation.key(key.as_str());
        }
        let limiter_args = push_args(
            &mut invocation,
            algorithm,
            rules,
            enforced,
            now_ms,
            member,
            costs,
        );
        for arg in &then.args {
            invocation.arg(arg.as_str());
        }
        invocation.arg(keys.len()).arg(limiter_args);
        invocation
    }
}

/// A follow-up to run after an admission: its script, keys and arguments.
pub struct Then<'a> {
    /// The composed script for the caller's follow-up.
    pub script: &'a FollowUp,
    /// The follow-up's own keys, which share the decision's slot.
    pub keys: Vec<String>,
    /// The follow-up's own arguments.
    pub args: Vec<String>,
}

/// A rule's parameters as `algorithm`'s script takes them (see its header): a slice
/// of a fixed array, so a decision allocates nothing for them.
pub fn params(algorithm: Algorithm, rule: &Rule) -> ([u64; 3], usize) {
    match algorithm {
        Algorithm::SlidingWindow | Algorithm::FixedWindow | Algorithm::SlidingWindowCounter => {
            ([rule.window_ms, rule.threshold, 0], 2)
        }
        Algorithm::TokenBucket | Algorithm::Gcra => {
            ([rule.capacity, rule.refill_tokens, rule.refill_ms], 3)
        }
        Algorithm::LeakyBucket => ([rule.window_ms, rule.threshold, rule.max_delay_ms], 3),
    }
}

/// The decision's arguments (see the contract above); answers how many it pushed.
fn push_args(
    invocation: &mut ScriptInvocation<'_>,
    algorithm: Algorithm,
    rules: &[Rule],
    enforced: usize,
    now_ms: Option<i64>,
    member: &str,
    costs: &[Cost],
) -> usize {
    match now_ms {
        Some(now) => invocation.arg(now),
        None => invocation.arg(""),
    };
    invocation.arg(member).arg(enforced);
    let mut pushed = 3;
    for rule in rules {
        let (values, count) = params(algorithm, rule);
        for &value in &values[..count] {
            invocation.arg(value);
        }
        pushed += count;
    }
    for cost in costs {
        invocation.arg(cost.hits());
    }
    pushed + costs.len()
}

/// Reads a composed script's reply (see [`FollowUp`]): the decision, and the follow-up's
/// reply when it ran; `None` when the reply is not one.
pub fn decode_with_follow_up(
    raw: Vec<redis::Value>,
    rules: usize,
) -> Option<(Reply, Option<redis::Value>)> {
    let mut parts = raw.into_iter();
    let decision: Vec<i64> = redis::from_redis_value(parts.next()?).ok()?;
    Some((decode(decision, rules)?, parts.next()))
}

/// Reads a script's reply for a policy of `rules` rules; `None` when it is not one (an
/// admission's is `8 + rules` values long, a refusal's 5).
pub fn decode(mut raw: Vec<i64>, rules: usize) -> Option<Reply> {
    let index = |one_based: i64| {
        usize::try_from(one_based)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .filter(|&i| i < rules)
    };
    let mask = |bits: i64| {
        u32::try_from(bits)
            .ok()
            .filter(|&bits| u64::from(bits) < 1u64 << rules)
    };
    let (decision, late_us) = match raw[..] {
        [1, tightest, remaining, next_slot_ms, late_us, delay_ms, near_limit, shadow_refused, ref left @ ..]
            if left.len() == rules =>
        {
            (
                Decision::Admitted {
                    // No enforced rule (an edge request of shadow rules only): nothing
                    // limits it, so nothing is "left" to learn from.
                    tightest: if tightest == 0 { 0 } else { index(tightest)? },
                    remaining: if tightest == 0 { i64::MAX } else { remaining },
                    next_slot_ms,
                    delay_ms: (0..=super::policy::MAX_DELAY_MS as i64)
                        .contains(&delay_ms)
                        .then_some(delay_ms)?,
                    near_limit: mask(near_limit)?,
                    shadow_refused: mask(shadow_refused)?,
                },
                late_us,
            )
        }
        [0, rule, retry_after_ms, longest_retry_after_ms, late_us] => (
            Decision::Refused {
                rule: index(rule)?,
                retry_after_ms,
                longest_retry_after_ms,
            },
            late_us,
        ),
        _ => return None,
    };
    if !(0..1000).contains(&late_us) {
        return None;
    }
    let rule_remaining = match decision {
        Decision::Admitted { .. } => {
            raw.drain(..8);
            raw
        }
        Decision::Refused { .. } => Vec::new(),
    };
    Some(Reply {
        decision,
        late_us,
        rule_remaining,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_decode_to_decisions_and_anything_else_is_refused() {
        let decision = |raw: &[i64]| decode(raw.to_vec(), 3).map(|reply| reply.decision);
        assert_eq!(
            decision(&[1, 2, 7, 0, 0, 12, 0b101, 0b100, 9, 7, 0]),
            Some(Decision::Admitted {
                tightest: 1,
                remaining: 7,
                next_slot_ms: 0,
                delay_ms: 12,
                near_limit: 0b101,
                shadow_refused: 0b100,
            })
        );
        let admitted = decode(vec![1, 2, 7, 0, 0, 12, 0b101, 0b100, 9, 7, 0], 3).unwrap();
        assert_eq!(admitted.rule_remaining, [9, 7, 0]);
        // Each rule's remaining, no more and no fewer.
        assert_eq!(decision(&[1, 2, 7, 0, 0, 12, 0, 0, 9, 7]), None);
        assert_eq!(decision(&[1, 2, 7, 0, 0, 12, 0, 0, 9, 7, 0, 0]), None);
        assert_eq!(decision(&[1, 2, 7, 0, 0, 12, 0, 0]), None);
        assert_eq!(decision(&[1, 2, 7, 0, 0, 0, 0b1000, 0, 1, 1, 1]), None);
        assert_eq!(decision(&[1, 2, 7, 0, 0, -1, 0, 0, 1, 1, 1]), None);
        assert_eq!(decision(&[1, 2, 7, 0, 0]), None);
        assert_eq!(
            decision(&[0, 1, 900, 59_000, 999]),
            Some(Decision::Refused {
                rule: 0,
                retry_after_ms: 900,
                longest_retry_after_ms: 59_000
            })
        );
        let refused = decode(vec![0, 1, 900, 59_000, 999], 3).unwrap();
        assert_eq!(
            (refused.late_us, refused.rule_remaining.capacity()),
            (999, 0)
        );
        assert_eq!(decision(&[1, 4, 7, 0, 0, 0, 0, 0, 1, 1, 1]), None);
        assert_eq!(decision(&[0, 0, 1, 1, 0]), None);
        assert_eq!(decision(&[0, 1, 1, 1, 1000]), None);
        assert_eq!(decision(&[1, 1, 0, 0]), None);
    }
}
