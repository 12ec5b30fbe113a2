//! Named time windows of a run (a fault and its recovery), each with its own latency,
//! statuses and causes. A script injecting faults appends one line per window to a file
//! while the load runs, `NAME START_MS END_MS` in Unix milliseconds; the report is cut
//! along them once the load is over. A request belongs to the window it was sent in.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::Serialize;

use crate::ledger::Record;
use crate::report::{by_cause, latency, Latency};

#[derive(Debug, Serialize)]
pub struct Phase {
    pub name: String,
    /// Seconds since the measured phase began.
    pub from_s: f64,
    pub to_s: f64,
    pub requests: u64,
    pub latency: Latency,
    pub by_status: BTreeMap<String, u64>,
    pub by_cause: BTreeMap<String, u64>,
}

/// A window as offsets from the start of the run.
struct Window {
    name: String,
    from: Duration,
    to: Duration,
}

/// Reads the windows of `path` (absent: none), relative to `start`, the wall-clock
/// instant the run's offsets count from.
fn read(path: &Path, start: SystemTime) -> anyhow::Result<Vec<Window>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let start_ms = start
        .duration_since(UNIX_EPOCH)
        .context("the clock is before 1970")?
        .as_millis() as i64;
    let offset = |ms: i64| Duration::from_millis((ms - start_ms).max(0) as u64);
    text.lines()
        .filter(|l| !l.trim().is_empty())
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

/// The figures of each window of `path`.
pub(super) fn cut(
    path: &Path,
    start: SystemTime,
    records: &[Record],
) -> anyhow::Result<Vec<Phase>> {
    Ok(read(path, start)?
        .into_iter()
        .map(|w| {
            let inside = || records.iter().filter(|r| r.sent >= w.from && r.sent < w.to);
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
            }
        })
        .collect())
}
