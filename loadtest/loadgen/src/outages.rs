//! The Redis outages of a run, as a fault injector writes them down while the load runs:
//! one line per outage, `KIND FROM_MS DOWN_MS UP_MS TO_MS` in Unix milliseconds.
//!
//! - `FROM`..`TO` may hold decisions made in process: from just before Redis is told to
//!   stop until every instance decides in Redis again (and a margin after);
//! - `DOWN`..`UP` holds no decision made in Redis: from its process's exit to its start;
//! - `KIND` is `kept` when Redis came back with every entry (`SHUTDOWN` fsyncs the
//!   append-only file first) and `lost` when it may not have (a SIGKILL under
//!   `appendfsync everysec` loses up to a second of writes).

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;

use crate::phases::{lines, offset_from};

/// One outage, as offsets from the start of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Outage {
    /// Redis came back with all its entries.
    pub(crate) kept: bool,
    pub(crate) from: Duration,
    pub(crate) down: Duration,
    pub(crate) up: Duration,
    pub(crate) to: Duration,
}

/// Reads the outages of `path` (absent: none), relative to `start`, the wall-clock
/// instant the run's offsets count from.
pub(crate) fn read(path: &Path, start: SystemTime) -> anyhow::Result<Vec<Outage>> {
    let offset = offset_from(start)?;
    let mut outages = Vec::new();
    for line in lines(path)? {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [kind, from, down, up, to] = fields[..] else {
            anyhow::bail!(
                "{}: expected KIND FROM_MS DOWN_MS UP_MS TO_MS, got {line:?}",
                path.display()
            );
        };
        let kept = match kind {
            "kept" => true,
            "lost" => false,
            other => anyhow::bail!("{}: kind {other:?} is not kept or lost", path.display()),
        };
        let ms = |v: &str| {
            v.parse::<i64>()
                .map(&offset)
                .with_context(|| format!("{v:?} in {line:?}"))
        };
        let outage = Outage {
            kept,
            from: ms(from)?,
            down: ms(down)?,
            up: ms(up)?,
            to: ms(to)?,
        };
        anyhow::ensure!(
            outage.from <= outage.down && outage.down <= outage.up && outage.up <= outage.to,
            "{}: {line:?} is not in the order FROM <= DOWN <= UP <= TO",
            path.display()
        );
        outages.push(outage);
    }
    Ok(outages)
}

/// How far the script's marks (its wall clock) may be from our monotonic offsets: the
/// two clocks are read apart, and NTP may slew one.
pub(crate) const MARK_SLACK: Duration = Duration::from_millis(100);

/// Where a group of admissions lies against the outages: which bound applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Class {
    InRedis,
    InProcess,
    Across,
    Unjudged,
}

impl Class {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::InRedis => "in Redis only",
            Self::InProcess => "in process only",
            Self::Across => "across an outage",
            Self::Unjudged => "across a Redis that lost data (not judged)",
        }
    }
}

/// The class of the admissions whose decisions lie in `from..=to`.
pub(crate) fn class(from: Duration, to: Duration, outages: &[Outage]) -> Class {
    let touches = |o: &Outage| from <= o.to + MARK_SLACK && to + MARK_SLACK >= o.from;
    if outages.iter().any(|o| !o.kept && touches(o)) {
        Class::Unjudged
    } else if outages
        .iter()
        .any(|o| from >= o.down + MARK_SLACK && to + MARK_SLACK <= o.up)
    {
        Class::InProcess
    } else if outages.iter().any(touches) {
        Class::Across
    } else {
        Class::InRedis
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn marks_are_read_as_offsets_and_out_of_order_ones_refused() {
        let start = UNIX_EPOCH + Duration::from_secs(1_000);
        let path = std::env::temp_dir().join(format!("loadgen-outages-{}", std::process::id()));
        std::fs::write(
            &path,
            "kept 1010000 1010100 1020000 1022000\n\nlost 1050000 1050000 1053000 1055000\n",
        )
        .expect("write");
        let outages = read(&path, start).expect("read");
        assert_eq!(
            outages[0],
            Outage {
                kept: true,
                from: Duration::from_secs(10),
                down: Duration::from_millis(10_100),
                up: Duration::from_secs(20),
                to: Duration::from_secs(22),
            }
        );
        assert!(!outages[1].kept && outages.len() == 2);
        std::fs::write(&path, "kept 1010000 1020000 1010100 1022000\n").expect("write");
        assert!(read(&path, start).is_err(), "DOWN after UP");
        std::fs::write(&path, "gone 1 2 3 4\n").expect("write");
        assert!(read(&path, start).is_err(), "an unknown kind");
        std::fs::remove_file(&path).expect("remove");
        assert!(read(&path, start).expect("absent").is_empty());
    }
}
