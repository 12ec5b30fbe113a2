//! The figures of a run, from its ledger: requests, rate, latency, answers by status,
//! dimension, code and cause, and the checks' verdicts; printed, or serialized as JSON.

use std::collections::BTreeMap;

use serde::Serialize;

use loadtest_core::ledger::Record;
use loadtest_core::report::{answers, by_cause, latency, Answers, Check, Latency};

use crate::samples::Sample;
use crate::shopper::{RoomReport, RoomSeen};

#[derive(Debug, Serialize)]
pub struct RunReport {
    pub item_id: i64,
    /// When the measured phase began (Unix milliseconds): every `_s` figure counts
    /// from it.
    pub start_unix_ms: u64,
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
    /// Every answer by status and code (`Record::answer`), each with its own latency:
    /// a fast refusal and a slow admission are not one distribution.
    pub answers: BTreeMap<String, Answers>,
    /// The side load's answers (`side`), by route (`limited`, `orders_read`).
    pub side: BTreeMap<String, BTreeMap<String, Answers>>,
    /// The targets' metrics sampled during the load (`samples`), when asked for.
    pub samples: Vec<Sample>,
    /// Requests sent whose answer was lost: counted as possibly admitted by the limit
    /// checks, and as possibly ordered by "orders match 200 answers".
    pub unknown_outcomes: u64,
    /// Open model: sends skipped because `max_in_flight` requests were outstanding.
    pub dropped: u64,
    /// The side load's sends skipped because 64 of their key were outstanding.
    pub side_dropped: u64,
    /// The named time windows of `Options::phases_file`, each with its own figures.
    pub phases: Vec<Phase>,
    /// The sale's figures as the clients saw them, for the history's report of it.
    pub sale: SaleTotals,
    /// Room mode: the room as the shoppers saw it.
    pub room: Option<RoomReport>,
    pub checks: Vec<Check>,
}

/// What the history's report of the run's sale (`GET /admin/api/items/{id}/report`,
/// issue 35) is held to, as the clients saw it: purchases of every kind (the load's
/// without a pass and the room's shoppers' with one). With `Options::sales` above 1 the
/// load's purchases are of several items and these are not one sale's.
#[derive(Debug, Default, Serialize)]
pub struct SaleTotals {
    /// Purchases sent, answered or not: the report's attempts.
    pub attempts: u64,
    /// Purchases answered 200: each is an order in Postgres (the store checks hold
    /// that), so this is the report's `bought`.
    pub orders: u64,
    /// Purchases the limiter refused (429), by the rule (dimension) that refused.
    pub refused: BTreeMap<String, u64>,
    /// Purchases refused 403 `NOT_ADMITTED`: without a pass while the room was on.
    pub not_admitted: u64,
    /// Room mode: shoppers whose join answered a ticket (0 without a room).
    pub joined: u64,
    /// Room mode: shoppers handed a pass.
    pub admitted: u64,
    /// Unix seconds of the first purchase sent and of the last answered: the minutes of
    /// the history from the first's to the last's hold every purchase of the run.
    pub first_unix_s: i64,
    pub last_unix_s: i64,
}

impl SaleTotals {
    pub(crate) fn of(records: &[Record], start_unix_ms: u64, room: &RoomSeen) -> Self {
        let mut refused = BTreeMap::new();
        for r in records.iter().filter(|r| r.status == 429) {
            let dimension = r.dimension.clone().unwrap_or_else(|| "-".into());
            *refused.entry(dimension).or_default() += 1;
        }
        let unix_s = |offset: std::time::Duration| {
            ((start_unix_ms + offset.as_millis() as u64) / 1000) as i64
        };
        Self {
            attempts: records.len() as u64,
            orders: records.iter().filter(|r| r.status == 200).count() as u64,
            refused,
            not_admitted: records
                .iter()
                .filter(|r| r.status == 403 && r.code.as_deref() == Some("NOT_ADMITTED"))
                .count() as u64,
            joined: room.joined(),
            admitted: room.admitted(),
            first_unix_s: records.iter().map(|r| r.sent).min().map_or(0, unix_s),
            last_unix_s: records.iter().map(|r| r.received).max().map_or(0, unix_s),
        }
    }
}

impl RunReport {
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
            println!("  answers: {}", answers_line(&phase.answers));
            for (route, answers) in &phase.side {
                println!("  {route}: {}", answers_line(answers));
            }
        }
        for (route, answers) in &self.side {
            println!("side {route}: {}", answers_line(answers));
        }
        if self.side_dropped > 0 {
            println!(
                "side dropped: {} sends (64 of their key in flight)",
                self.side_dropped
            );
        }
        if self.dropped > 0 {
            println!("dropped:      {} sends (too many in flight)", self.dropped);
        }
        let sale = &self.sale;
        println!(
            "sale:         {} attempts, {} orders, refused {}, {} not admitted, {} joined, {} admitted",
            sale.attempts,
            sale.orders,
            line(&sale.refused),
            sale.not_admitted,
            sale.joined,
            sale.admitted
        );
        if let Some(room) = &self.room {
            println!(
                "room:         {} shoppers, {} joined, {} admitted, {} bought",
                room.shoppers, room.joined, room.admitted, room.bought
            );
            println!("  joins:      {}", line(&room.joins));
            println!("  polls:      {}", line(&room.polls));
            println!("  endings:    {}", line(&room.endings));
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

/// `200 ×812 p99 4.1 ms  503 OVERLOADED ×12 p99 0.9 ms`.
fn answers_line(answers: &BTreeMap<String, Answers>) -> String {
    if answers.is_empty() {
        return "-".into();
    }
    answers
        .iter()
        .map(|(k, a)| format!("{k} ×{} p99 {:.1} ms", a.count, a.latency.p99_ms))
        .collect::<Vec<_>>()
        .join("  ")
}

pub(crate) fn summarize(item_id: i64, records: &[Record], seconds: f64) -> RunReport {
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
    RunReport {
        item_id,
        start_unix_ms: 0,
        requests: records.len() as u64,
        seconds,
        requests_per_sec: records.len() as f64 / seconds.max(f64::EPSILON),
        latency: latency(records.iter()),
        by_status,
        by_dimension,
        by_code,
        by_cause: by_cause(records.iter()),
        answers: answers(records.iter()),
        side: BTreeMap::new(),
        samples: Vec::new(),
        unknown_outcomes: records
            .iter()
            .filter(|r| r.status == 0 && r.possibly_admitted())
            .count() as u64,
        dropped: 0,
        side_dropped: 0,
        phases: Vec::new(),
        sale: SaleTotals::default(),
        room: None,
        checks: Vec::new(),
    }
}

/// The figures of one named window of the run (a fault, its recovery): see `phases`,
/// which cuts the ledger along the windows.
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
    /// The purchases by answer, each with its latency (`RunReport::answers`).
    pub answers: BTreeMap<String, Answers>,
    /// The side load's answers by route (`RunReport::side`).
    pub side: BTreeMap<String, BTreeMap<String, Answers>>,
}
