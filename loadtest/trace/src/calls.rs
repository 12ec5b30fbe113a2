//! Script calls as the app sends them, in pipelines: the scripts loaded once (SCRIPT
//! LOAD answers each one's hash), then EVALSHA by the hash. `redis::Script` has no place
//! in a pipeline, so a script Redis forgot mid-run (a restart) fails the run with
//! NOSCRIPT instead of being loaded again.

use std::time::Duration;

use anyhow::{bail, Context};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Pipeline};

use crate::algorithm::Algorithm;

/// One decision: `None` refused, `Some(delay_ms)` admitted with the delay the shaper
/// asked for (0 for the others).
pub type Answer = Option<u32>;

/// A connection whose replies may take long: a pipeline of thousands of script calls.
pub async fn connect(url: &str) -> anyhow::Result<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(120)));
    redis::Client::open(url)
        .context("REDIS_URL")?
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// The six scripts' hashes, after SCRIPT LOAD of each.
pub struct Scripts {
    shas: Vec<String>,
}

impl Scripts {
    pub async fn load(conn: &mut MultiplexedConnection) -> anyhow::Result<Self> {
        let mut shas = Vec::new();
        for algorithm in Algorithm::ALL {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(algorithm.source())
                .query_async(conn)
                .await
                .with_context(|| format!("SCRIPT LOAD of {}.lua", algorithm.name()))?;
            shas.push(sha);
        }
        Ok(Self { shas })
    }

    pub fn sha(&self, algorithm: Algorithm) -> &str {
        &self.shas[algorithm as usize]
    }
}

/// One rule's decision on `key` at `now_ms` (`None`: the Redis clock), added to `pipe`:
/// ARGV = now, the request's unique id, 1 enforced rule, then the rule's parameters.
pub fn push(
    pipe: &mut Pipeline,
    sha: &str,
    key: &str,
    now_ms: Option<i64>,
    member: &str,
    params: &[i64],
) {
    let call = pipe.cmd("EVALSHA").arg(sha).arg(1).arg(key);
    match now_ms {
        Some(now) => call.arg(now),
        None => call.arg(""),
    };
    call.arg(member).arg(1).arg(params);
}

/// Where a run's keys live (a prefix no other run has) and the tag of its request ids.
#[derive(Debug, Clone)]
pub struct Namespace {
    pub prefix: String,
    pub tag: u64,
}

impl Namespace {
    /// A namespace inside this one.
    pub fn within(&self, name: &str) -> Self {
        Self {
            prefix: format!("{}:{name}", self.prefix),
            tag: self.tag,
        }
    }

    pub fn key(&self, name: impl std::fmt::Display) -> String {
        format!("{}:{name}", self.prefix)
    }

    pub fn member(&self, sequence: usize) -> String {
        member(self.tag, sequence)
    }
}

/// A request id in the app's shape: a 16-hex-digit tag, then a sequence number in hex.
pub fn member(tag: u64, sequence: usize) -> String {
    format!("{tag:016x}{sequence:x}")
}

/// The decision in a reply: admitted `{1, t, remaining, next, late, delay, near,
/// shadow}` or refused `{0, r, wait, longest, late}`.
pub fn answer(reply: &[i64]) -> anyhow::Result<Answer> {
    match reply {
        [1, _, _, _, _, delay, _, _] => Ok(Some(u32::try_from(*delay).context("delay")?)),
        [0, _, _, _, _] => Ok(None),
        _ => bail!("a reply outside the contract: {reply:?}"),
    }
}

/// Unlinks every key under `prefix`; answers how many there were.
pub async fn forget(conn: &mut MultiplexedConnection, prefix: &str) -> anyhow::Result<usize> {
    let pattern = format!("{prefix}:*");
    let mut cursor = 0u64;
    let mut gone = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        if !keys.is_empty() {
            gone += keys.len();
            redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<()>(conn)
                .await?;
        }
        if next == 0 {
            return Ok(gone);
        }
        cursor = next;
    }
}
