//! Named time windows of a run (a fault and its recovery), each with its own latency,
//! statuses and causes. A script injecting faults appends one line per window to a file
//! while the load runs, `NAME START_MS END_MS` in Unix milliseconds; the report is cut
//! along them once the load is over. A request belongs to the window it was sent in.
//! (The Redis outages the checks judge around are read the same way: `outages`.)

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use loadtest_core::ledger::Record;
use loadtest_core::report::{answers, by_cause, latency};

use crate::report::Phase;
use crate::side::{side_answers, SideRecord};

/// A window as offsets from the start of the run.
struct Window {
    name: String,
    from: Duration,
    to: Duration,
}

/// The non-blank lines of `path`, a file a fault injector writes while the load runs;
/// none when it does not exist.
pub(crate) fn lines(path: &Path) -> anyhow::Result<Vec<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Unix milliseconds as an offset from `start`, the wall-clock instant the run's
/// offsets count from (0 for an instant before it).
pub(crate) fn offset_from(start: SystemTime) -> anyhow::Result<impl Fn(i64) -> Duration> {
    let start_ms = start
        .duration_since(UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_millis() as i64;
    Ok(move |ms: i64| Duration::from_millis((ms - start_ms).max(0) as u64))
}

/// Reads the windows of `path` (absent: none), relative to `start`.
fn read(path: &Path, start: SystemTime) -> anyhow::Result<Vec<Window>> {
    let offset = offset_from(start)?;
    lines(path)?
        .iter()
        .map(|l| {
            let mut fields = l.split_whitespace();
            let (Some(name), Some(from), Some(to), None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                anyhow::bail!(
                    "{}: expected NAME START_MS END_MS, got {l:?}",
                    path.display()
                );
            };
            let ms = |v: &str| v.parse::<i64>().with_context(|| format!("{v:?} in {l:?}"));
            Ok(Window {
                name: name.to_string(),
                from: offset(ms(from)?),
                to: offset(ms(to)?),
            })
        })
        .collect()
}

/// The figures of each window of `path`: the purchases' and the side load's.
pub(super) fn cut(
    path: &Path,
    start: SystemTime,
    records: &[Record],
    side: &[SideRecord],
) -> anyhow::Result<Vec<Phase>> {
    Ok(read(path, start)?
        .into_iter()
        .map(|w| {
            let during = |r: &Record| r.sent >= w.from && r.sent < w.to;
            let inside = || records.iter().filter(|r| during(r));
            let mut by_status = BTreeMap::new();
            for r in inside() {
                let status = match r.status {
                    0 => "error".to_string(),
                    s => s.to_string(),
                };
                *by_status.entry(status).or_default() += 1;
            }
            Phase {
                name: w.name,
                from_s: w.from.as_secs_f64(),
                to_s: w.to.as_secs_f64(),
                requests: inside().count() as u64,
                latency: latency(inside()),
                by_status,
                by_cause: by_cause(inside()),
                answers: answers(inside()),
                side: side_answers(side.iter().filter(|s| during(&s.record))),
            }
        })
        .collect())
}
