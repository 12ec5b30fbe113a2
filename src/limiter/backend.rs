//! The Redis side: one Lua script per algorithm, one round trip per decision.
//!
//! Scripts are compiled into the binary from `lua/` and wrapped in `redis::Script`,
//! which sends EVALSHA and falls back to EVAL (loading the script) after a Redis
//! restart. Both scripts share one calling convention, documented in their headers.

use redis::aio::ConnectionManager;
use redis::Script;

use super::policy::{Algorithm, Rule};

pub struct ScriptBackend {
    sliding_window: Script,
    token_bucket: Script,
}

/// What a script answered, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub admitted: bool,
    /// Index into the policy's rules of the first refusing rule.
    pub first_refusing: Option<usize>,
    pub remaining: Vec<i64>,
    /// Per rule; > 0 exactly for the refusing ones.
    pub retry_after_ms: Vec<i64>,
}

impl Default for ScriptBackend {
    fn default() -> Self {
        Self {
            sliding_window: Script::new(include_str!("../../lua/sliding_window.lua")),
            token_bucket: Script::new(include_str!("../../lua/token_bucket.lua")),
        }
    }
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

    /// Runs one decision. `keys[i]` belongs to `rules[i]`.
    pub async fn decide(
        &self,
        conn: &mut ConnectionManager,
        algorithm: Algorithm,
        keys: &[String],
        rules: &[Rule],
        now_ms: Option<i64>,
        request_id: &str,
    ) -> redis::RedisResult<Decision> {
        let mut invocation = self.script(algorithm).prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        invocation
            .arg(now_ms.map(|n| n.to_string()).unwrap_or_default())
            .arg(request_id);
        for rule in rules {
            match algorithm {
                Algorithm::SlidingWindow => invocation.arg(rule.window_ms).arg(rule.threshold),
                Algorithm::TokenBucket => invocation
                    .arg(rule.capacity)
                    .arg(rule.refill_tokens)
                    .arg(rule.refill_ms),
            };
        }
        let raw: Vec<i64> = invocation.invoke_async(conn).await?;
        decode(&raw, rules.len()).ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::TypeError,
                "unexpected limiter script reply",
            ))
        })
    }
}

fn decode(raw: &[i64], rules: usize) -> Option<Decision> {
    if raw.len() != 2 + 2 * rules {
        return None;
    }
    let first = usize::try_from(raw[1]).ok()?;
    Some(Decision {
        admitted: raw[0] == 1,
        first_refusing: first.checked_sub(1),
        remaining: raw[2..2 + rules].to_vec(),
        retry_after_ms: raw[2 + rules..].to_vec(),
    })
}
