//! The figures of a run, from its ledger: requests, rate, latency, answers by status,
//! dimension, code and cause, and the checks' verdicts; printed, or serialized as JSON.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::ledger::Record;
use crate::phases::Phase;

#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub item_id: i64,
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_sec: f64,
    pub latency: Latency,
    pub by_status: BTreeMap<String, u64>,
    pub by_dimension: BTreeMap<String, u64>,
    pub by_code: BTreeMap<String, u64>,
    /// Server errors by status and code (`503 LIMITER_UNAVAILABLE`) and requests
    /// without an answer by why (`error connect`, `error connection lost`, `error
    /// timeout`).
    pub by_cause: BTreeMap<String, u64>,
    /// Requests sent whose answer was lost: counted as possibly admitted by the limit
    /// checks, and as possibly ordered by "orders match 200 answers".
    pub unknown_outcomes: u64,
    /// Open model: sends skipped because `max_in_flight` requests were outstanding.
    pub dropped: u64,
    /// The named time windows of `Options::phases_file`, each with its own figures.
    pub phases: Vec<Phase>,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    pub fn failed_checks(&self) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect()
    }

    pub fn count(&self, status: u16) -> u64 {
        self.by_status
            .get(&status.to_string())
            .copied()
            .unwrap_or(0)
    }

    pub fn print(&self) {
        println!(
            "item {}: {} requests in {:.1} s = {:.0} req/s",
            self.item_id, self.requests, self.seconds, self.requests_per_sec
        );
        println!(
            "latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
            self.latency.p50_ms, self.latency.p90_ms, self.latency.p99_ms, self.latency.max_ms
        );
        println!("by status:    {}", line(&self.by_status));
        println!("by dimension: {}", line(&self.by_dimension));
        println!("by code:      {}", line(&self.by_code));
        println!("by cause:     {}", line(&self.by_cause));
        for phase in &self.phases {
            println!(
                "phase {} ({:.1}-{:.1} s): {} requests, p99 {:.2} ms, max {:.2} ms, {}",
                phase.name,
                phase.from_s,
                phase.to_s,
                phase.requests,
                phase.latency.p99_ms,
                phase.latency.max_ms,
                line(&phase.by_cause)
            );
        }
        if self.dropped > 0 {
            println!("dropped:      {} sends (too many in flight)", self.dropped);
        }
        for check in &self.checks {
            println!(
                "[{}] {}: {}",
                if check.passed { "ok" } else { "FAILED" },
                check.name,
                check.detail
            );
        }
    }
}

fn line(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("  ")
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub(crate) fn summarize(item_id: i64, records: &[Record], seconds: f64) -> Report {
    let mut by_status = BTreeMap::new();
    let mut by_dimension = BTreeMap::new();
    let mut by_code = BTreeMap::new();
    for r in records {
        let status = if r.status == 0 {
            "error".to_string()
        } else {
            r.status.to_string()
        };
        *by_status.entry(status).or_default() += 1;
        if let Some(d) = &r.dimension {
            *by_dimension.entry(d.clone()).or_default() += 1;
        }
        if let Some(c) = &r.code {
            *by_code.entry(c.clone()).or_default() += 1;
        }
    }
    Report {
        item_id,
        requests: records.len() as u64,
        seconds,
        requests_per_sec: records.len() as f64 / seconds.max(f64::EPSILON),
        latency: latency(records.iter()),
        by_status,
        by_dimension,
        by_code,
        by_cause: by_cause(records.iter()),
        unknown_outcomes: records
            .iter()
            .filter(|r| r.status == 0 && r.possibly_admitted())
            .count() as u64,
        dropped: 0,
        phases: Vec::new(),
        checks: Vec::new(),
    }
}

pub(crate) fn latency<'a>(records: impl Iterator<Item = &'a Record>) -> Latency {
    let mut latencies: Vec<f64> = records
        .map(|r| (r.received - r.sent).as_secs_f64() * 1000.0)
        .collect();
    latencies.sort_by(|a, b| a.total_cmp(b));
    Latency {
        p50_ms: percentile(&latencies, 50.0),
        p90_ms: percentile(&latencies, 90.0),
        p99_ms: percentile(&latencies, 99.0),
        max_ms: latencies.last().copied().unwrap_or(0.0),
    }
}

pub(crate) fn by_cause<'a>(records: impl Iterator<Item = &'a Record>) -> BTreeMap<String, u64> {
    let mut causes = BTreeMap::new();
    for cause in records.filter_map(Record::cause) {
        *causes.entry(cause).or_default() += 1;
    }
    causes
}
