//! The Redis side: one Lua script per algorithm, one round trip per decision.
//!
//! Scripts are compiled into the binary from `lua/` and wrapped in `redis::Script`,
//! which sends EVALSHA and falls back to EVAL (loading the script) after a Redis
//! restart. Both scripts share one calling convention, documented in their headers.

use redis::{Script, ScriptInvocation};

use super::policy::{Algorithm, Rule};

pub struct ScriptBackend {
    sliding_window: Script,
    token_bucket: Script,
}

/// What a script answered (see the reply format in the scripts' headers), with rule
/// indexes 0-based, and how late in its millisecond the script's clock read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub decision: Decision,
    /// µs past the millisecond the Redis clock read (0 when the app passed the time):
    /// every wait ends this much sooner after the call than it reads.
    pub late_us: i64,
}

/// The decision itself: exactly what the response headers and the denial cache need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Every rule admitted and recorded the request. `tightest` is the rule with the
    /// fewest requests left (the first on ties), `remaining` that count after this one;
    /// when that is 0, `next_slot_ms` is how long until `tightest` admits again (this
    /// request took its last slot), else 0.
    Admitted {
        tightest: usize,
        remaining: i64,
        next_slot_ms: i64,
    },
    /// Nothing was written. `rule` is the first refusing rule and `retry_after_ms` its
    /// own wait; `longest_retry_after_ms` is the longest wait among the refusing rules:
    /// only then would all of them admit.
    Refused {
        rule: usize,
        retry_after_ms: i64,
        longest_retry_after_ms: i64,
    },
}

const SLIDING_WINDOW: &str = include_str!("../../lua/sliding_window.lua");
const TOKEN_BUCKET: &str = include_str!("../../lua/token_bucket.lua");

fn source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::SlidingWindow => SLIDING_WINDOW,
        Algorithm::TokenBucket => TOKEN_BUCKET,
    }
}

impl Default for ScriptBackend {
    fn default() -> Self {
        Self {
            sliding_window: Script::new(SLIDING_WINDOW),
            token_bucket: Script::new(TOKEN_BUCKET),
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
    sliding_window: Script,
    token_bucket: Script,
}

impl FollowUp {
    pub fn new(source_code: &str) -> Self {
        let compose = |algorithm| Script::new(&compose(source(algorithm), source_code));
        Self {
            sliding_window: compose(Algorithm::SlidingWindow),
            token_bucket: compose(Algorithm::TokenBucket),
        }
    }

    fn script(&self, algorithm: Algorithm) -> &Script {
        match algorithm {
            Algorithm::SlidingWindow => &self.sliding_window,
            Algorithm::TokenBucket => &self.token_bucket,
        }
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
        match algorithm {
            Algorithm::SlidingWindow => &self.sliding_window,
            Algorithm::TokenBucket => &self.token_bucket,
        }
    }

    /// The script call deciding `rules` (`keys[i]` belongs to `rules[i]`); send it with
    /// `RedisStore::call` and read the reply with [`decode`].
    pub fn invocation<'a>(
        &'a self,
        algorithm: Algorithm,
        keys: &[String],
        rules: &[Rule],
        now_ms: Option<i64>,
        member: &str,
    ) -> ScriptInvocation<'a> {
        let mut invocation = self.script(algorithm).prepare_invoke();
        for key in keys {
            invocation.key(key.as_str());
        }
        push_args(&mut invocation, algorithm, rules, now_ms, member);
        invocation
    }

    /// The same decision with `then` composed after it (see [`FollowUp`]); read the
    /// reply with [`decode_with_follow_up`].
    pub fn invocation_then<'a>(
        algorithm: Algorithm,
        keys: &[String],
        rules: &[Rule],
        now_ms: Option<i64>,
        member: &str,
        then: &Then<'a>,
    ) -> ScriptInvocation<'a> {
        let mut invocation = then.script.script(algorithm).prepare_invoke();
        for key in keys.iter().chain(&then.keys) {
            invocation.key(key.as_str());
        }
        let limiter_args = push_args(&mut invocation, algorithm, rules, now_ms, member);
        for arg in &then.args {
            invocation.arg(arg.as_str());
        }
        invocation.arg(keys.len()).arg(limiter_args);
        invocation
    }
}

/// A follow-up to run after an admission: its script, keys and arguments.
pub struct Then<'a> {
    pub script: &'a FollowUp,
    pub keys: Vec<String>,
    pub args: Vec<String>,
}

/// The decision's arguments (see the scripts' headers); answers how many it pushed.
fn push_args(
    invocation: &mut ScriptInvocation<'_>,
    algorithm: Algorithm,
    rules: &[Rule],
    now_ms: Option<i64>,
    member: &str,
) -> usize {
    match now_ms {
        Some(now) => invocation.arg(now),
        None => invocation.arg(""),
    };
    invocation.arg(member);
    for rule in rules {
        match algorithm {
            Algorithm::SlidingWindow => invocation.arg(rule.window_ms).arg(rule.threshold),
            Algorithm::TokenBucket => invocation
                .arg(rule.capacity)
                .arg(rule.refill_tokens)
                .arg(rule.refill_ms),
        };
    }
    2 + rules.len()
        * match algorithm {
            Algorithm::SlidingWindow => 2,
            Algorithm::TokenBucket => 3,
        }
}

/// Reads a composed script's reply (see [`FollowUp`]): the decision, and the follow-up's
/// reply when it ran; `None` when the reply is not one.
pub fn decode_with_follow_up(
    raw: Vec<redis::Value>,
    rules: usize,
) -> Option<(Reply, Option<redis::Value>)> {
    let mut parts = raw.into_iter();
    let decision: Vec<i64> = redis::from_redis_value(parts.next()?).ok()?;
    Some((decode(&decision, rules)?, parts.next()))
}

/// Reads a script's reply for a policy of `rules` rules; `None` when it is not one.
pub fn decode(raw: &[i64], rules: usize) -> Option<Reply> {
    let index = |one_based: i64| {
        usize::try_from(one_based)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .filter(|&i| i < rules)
    };
    let (decision, late_us) = match *raw {
        [1, tightest, remaining, next_slot_ms, late_us] => (
            Decision::Admitted {
                tightest: index(tightest)?,
                remaining,
                next_slot_ms,
            },
            late_us,
        ),
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
    (0..1000)
        .contains(&late_us)
        .then_some(Reply { decision, late_us })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_decode_to_decisions_and_anything_else_is_refused() {
        let decision = |raw: &[i64]| decode(raw, 3).map(|reply| reply.decision);
        assert_eq!(
            decision(&[1, 2, 7, 0, 0]),
            Some(Decision::Admitted {
                tightest: 1,
                remaining: 7,
                next_slot_ms: 0
            })
        );
        assert_eq!(
            decision(&[0, 1, 900, 59_000, 999]),
            Some(Decision::Refused {
                rule: 0,
                retry_after_ms: 900,
                longest_retry_after_ms: 59_000
            })
        );
        assert_eq!(decode(&[0, 1, 900, 59_000, 999], 3).unwrap().late_us, 999);
        assert_eq!(decision(&[1, 4, 7, 0, 0]), None);
        assert_eq!(decision(&[0, 0, 1, 1, 0]), None);
        assert_eq!(decision(&[0, 1, 1, 1, 1000]), None);
        assert_eq!(decision(&[1, 1, 0, 0]), None);
    }
}
