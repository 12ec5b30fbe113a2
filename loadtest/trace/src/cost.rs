//! What each algorithm costs Redis: the memory of one key, and the CPU of one call.
//!
//! Memory: `MEMORY USAGE key SAMPLES 0` (every element counted) of a key filled at a
//! steady rate, on the trace's clock: 100 requests over a minute (100 per 60 s), and
//! 10 000 requests in one second (10 000 per 1 000 ms).
//!
//! CPU: `usec_per_call` of `cmdstat_evalsha` in `INFO commandstats`, after CONFIG
//! RESETSTAT and N calls, with the Redis clock (ARGV[1] = "", as the app calls
//! them): the time inside the command, the script's own commands included, without the
//! socket's work. Admitted: every call on a fresh key, 100 per 60 s (a key's first
//! request). Refused: every call on one full key; 100 per hour there (a bucket refills
//! a token in 36 s, the shaper frees a slot as often), so no call of a run finds room
//! again; a run that found some, across an aligned hour's edge, is made again. PING
//! beside them is the floor of a call. The run keeps the median of `Config::cpu_runs`.

use anyhow::{bail, Context};
use redis::aio::MultiplexedConnection;

use crate::algorithm::Algorithm;
use crate::calls::{self, Namespace, Scripts};
use crate::workload::{LIMIT, WINDOW_MS};

/// Calls per pipeline.
const BATCH: usize = 1_000;
const HOUR_MS: i64 = 3_600_000;

/// One key filled with `calls` requests.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub bytes: i64,
    pub admitted: usize,
    pub calls: usize,
}

/// How a key is filled: `calls` requests spread evenly over `span_ms` of app clock
/// from `start_ms`, under a rule of `threshold` per `window_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Fill {
    pub window_ms: i64,
    pub threshold: i64,
    pub calls: usize,
    pub span_ms: i64,
    pub start_ms: i64,
}

/// Fills a key (`keys.key(threshold)`) as `fill` says and measures it.
pub async fn memory(
    conn: &mut MultiplexedConnection,
    scripts: &Scripts,
    algorithm: Algorithm,
    keys: &Namespace,
    fill: Fill,
) -> anyhow::Result<Memory> {
    let key = keys.key(fill.threshold);
    let params = algorithm.params(fill.window_ms, fill.threshold);
    let count = fill.calls;
    let mut admitted = 0;
    for from in (0..count).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for i in from..(from + BATCH).min(count) {
            let now = fill.start_ms + i as i64 * fill.span_ms / count as i64;
            let member = keys.member(i);
            calls::push(
                &mut pipe,
                scripts.sha(algorithm),
                &key,
                Some(now),
                &member,
                &params,
            );
        }
        let replies: Vec<Vec<i64>> = pipe.query_async(conn).await?;
        for reply in &replies {
            admitted += usize::from(calls::answer(reply)?.is_some());
        }
    }
    let bytes: Option<i64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(&key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(conn)
        .await?;
    Ok(Memory {
        bytes: bytes.with_context(|| format!("{key} is gone"))?,
        admitted,
        calls: count,
    })
}

/// A command's statistics since the last CONFIG RESETSTAT.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stat {
    pub calls: u64,
    pub usec_per_call: f64,
    /// Calls counted that were not ours: another client of the same Redis (its time is
    /// in `usec_per_call` too).
    pub foreign: u64,
}

async fn reset(conn: &mut MultiplexedConnection) -> anyhow::Result<()> {
    Ok(redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(conn)
        .await?)
}

async fn stat(conn: &mut MultiplexedConnection, command: &str) -> anyhow::Result<Stat> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find_map(|l| l.strip_prefix(prefix.as_str())) else {
        return Ok(Stat::default());
    };
    let mut stat = Stat::default();
    for field in line.split(',') {
        match field.split_once('=') {
            Some(("calls", v)) => stat.calls = v.trim().parse()?,
            Some(("usec_per_call", v)) => stat.usec_per_call = v.trim().parse()?,
            _ => {}
        }
    }
    Ok(stat)
}

/// `count` PINGs, pipelined.
pub async fn ping(conn: &mut MultiplexedConnection, count: usize) -> anyhow::Result<Stat> {
    reset(conn).await?;
    for from in (0..count).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for _ in from..(from + BATCH).min(count) {
            pipe.cmd("PING");
        }
        pipe.query_async::<()>(conn).await?;
    }
    checked(stat(conn, "ping").await?, count, "PING")
}

/// The statistics, with the calls beyond our `count` marked foreign.
fn checked(mut stat: Stat, count: usize, what: &str) -> anyhow::Result<Stat> {
    if stat.calls < count as u64 {
        bail!(
            "{what}: commandstats counted {} calls, we made {count}",
            stat.calls
        );
    }
    stat.foreign = stat.calls - count as u64;
    Ok(stat)
}

/// One run of `count` script calls on the Redis clock, all admitted (`refused` false:
/// fresh keys `keys.key(i)`) or all refused (one key `keys.key("full")`, filled first).
/// Answers the statistics and whether every call was decided as meant.
pub async fn script_run(
    conn: &mut MultiplexedConnection,
    scripts: &Scripts,
    algorithm: Algorithm,
    keys: &Namespace,
    count: usize,
    refused: bool,
) -> anyhow::Result<(Stat, bool)> {
    let sha = scripts.sha(algorithm);
    let full_key = keys.key("full");
    let params = if refused {
        let params = algorithm.params(HOUR_MS, LIMIT);
        let mut pipe = redis::pipe();
        for i in 0..2 * LIMIT as usize {
            calls::push(&mut pipe, sha, &full_key, None, &keys.member(i), &params);
        }
        pipe.query_async::<()>(conn).await?;
        params
    } else {
        algorithm.params(WINDOW_MS, LIMIT)
    };
    reset(conn).await?;
    let mut as_meant = true;
    let mut written = vec![full_key.clone()];
    for from in (0..count).step_by(BATCH) {
        let mut pipe = redis::pipe();
        for i in from..(from + BATCH).min(count) {
            let key = if refused {
                full_key.clone()
            } else {
                keys.key(i)
            };
            let member = keys.member(count + i);
            calls::push(&mut pipe, sha, &key, None, &member, &params);
            if !refused {
                written.push(key);
            }
        }
        let replies: Vec<Vec<i64>> = pipe.query_async(conn).await?;
        for reply in &replies {
            as_meant &= calls::answer(reply)?.is_some() != refused;
        }
    }
    let stat = checked(stat(conn, "evalsha").await?, count, algorithm.name())?;
    for chunk in written.chunks(BATCH) {
        redis::cmd("UNLINK")
            .arg(chunk)
            .query_async::<()>(conn)
            .await?;
    }
    Ok((stat, as_meant))
}
