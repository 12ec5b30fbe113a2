//! The pieces every tool's report is made of: latency percentiles, the answers of a
//! ledger grouped by what came back, and a check with its verdict.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::ledger::Record;

#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The requests of one answer (`200`, `503 OVERLOADED`, `error timeout`): how many, when
/// the first and the last were sent (seconds since the measured phase began), their
/// latency, and the same counts per target.
#[derive(Debug, Serialize)]
pub struct Answers {
    pub count: u64,
    pub first_s: f64,
    pub last_s: f64,
    pub latency: Latency,
    /// Indexed by target (each instance has its own breaker and shedding limit).
    pub per_target: Vec<Span>,
}

/// How many requests, and when the first and the last of them were sent.
#[derive(Debug, Clone, Serialize)]
pub struct Span {
    pub count: u64,
    pub first_s: f64,
    pub last_s: f64,
}

impl Span {
    pub fn of<'a>(records: impl Iterator<Item = &'a &'a Record>) -> Self {
        let mut span = Self {
            count: 0,
            first_s: f64::INFINITY,
            last_s: 0.0,
        };
        for r in records {
            let sent = r.sent.as_secs_f64();
            span.count += 1;
            span.first_s = span.first_s.min(sent);
            span.last_s = span.last_s.max(sent);
        }
        if span.count == 0 {
            span.first_s = 0.0;
        }
        span
    }
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn latency<'a>(records: impl Iterator<Item = &'a Record>) -> Latency {
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

/// The records by answer, each with its count, its first and last send and its latency.
pub fn answers<'a>(records: impl Iterator<Item = &'a Record>) -> BTreeMap<String, Answers> {
    let mut groups: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
    for r in records {
        groups.entry(r.answer()).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|(answer, records)| {
            let all = Span::of(records.iter());
            let targets = records.iter().map(|r| r.target + 1).max().unwrap_or(0);
            let per_target = (0..targets)
                .map(|t| Span::of(records.iter().filter(|r| r.target == t)))
                .collect();
            let figures = Answers {
                count: all.count,
                first_s: all.first_s,
                last_s: all.last_s,
                latency: latency(records.into_iter()),
                per_target,
            };
            (answer, figures)
        })
        .collect()
}

pub fn by_cause<'a>(records: impl Iterator<Item = &'a Record>) -> BTreeMap<String, u64> {
    let mut causes = BTreeMap::new();
    for cause in records.filter_map(Record::cause) {
        *causes.entry(cause).or_default() += 1;
    }
    causes
}
