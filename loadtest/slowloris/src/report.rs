//! The run's report: the table on stdout, the same as JSON.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::attack::AttackReport;
use crate::measure::Figures;

#[derive(Debug, Serialize)]
pub struct SlowlorisReport {
    pub target: String,
    pub probe_target: Option<String>,
    pub item_id: i64,
    /// From the first attacker connect to the last socket's close.
    pub attack_seconds: f64,
    /// The window the measured requests were sent in, from the start of the attack.
    pub measured_from_s: f64,
    pub measured_to_s: f64,
    pub liveness_rate: f64,
    pub purchase_rate: f64,
    pub request_timeout_ms: u64,
    pub liveness_main: Figures,
    pub liveness_probe: Option<Figures>,
    pub purchases: Figures,
    /// The same traffic before the attack, without it.
    pub baseline: Option<Baseline>,
    pub attack: AttackReport,
}

/// Everyone else's figures over `seconds` before the attack began.
#[derive(Debug, Serialize)]
pub struct Baseline {
    pub seconds: f64,
    pub liveness_main: Figures,
    pub liveness_probe: Option<Figures>,
    pub purchases: Figures,
}

impl SlowlorisReport {
    /// Purchases' p99 during the attack over their p99 without it (`None` when either
    /// falls on an unanswered request).
    pub fn purchases_p99_ratio(&self) -> Option<f64> {
        let without = self.baseline.as_ref()?.purchases.p99_ms?;
        Some(self.purchases.p99_ms? / without.max(f64::EPSILON))
    }
}

impl SlowlorisReport {
    /// The summary table, on stdout.
    pub fn print(&self) {
        let a = &self.attack;
        println!(
            "slowloris: {} sockets from {} addresses from {} on {}, a byte every {} ms, {:.1} s; measured sends {:.0}-{:.0} s, timeout {} ms",
            a.sockets,
            a.addresses,
            a.source,
            self.target,
            a.byte_every_ms,
            self.attack_seconds,
            self.measured_from_s,
            self.measured_to_s,
            self.request_timeout_ms
        );
        println!(
            "{:<16} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10}  outcomes",
            "", "sent", "answered", "p50 ms", "p99 ms", "max ms", "slowest"
        );
        let mut rows = Vec::new();
        if let Some(b) = &self.baseline {
            rows.push(("live, no attack", &b.liveness_main));
            if let Some(probe) = &b.liveness_probe {
                rows.push(("probe, no attack", probe));
            }
            rows.push(("buys, no attack", &b.purchases));
        }
        rows.push(("liveness main", &self.liveness_main));
        if let Some(probe) = &self.liveness_probe {
            rows.push(("liveness probe", probe));
        }
        rows.push(("purchases", &self.purchases));
        for (name, f) in rows {
            println!(
                "{name:<16} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10}  {}",
                f.sent,
                f.answered,
                ms(f.p50_ms),
                ms(f.p99_ms),
                ms(f.max_ms),
                ms(f.slowest_answer_ms),
                counts(&f.outcomes)
            );
        }
        println!(
            "attacker: open at once mean {:.0} (min {}, max {}); connects {} ({:.0}/s), established {}, failed: {}",
            a.held_open.mean,
            a.held_open.min,
            a.held_open.max,
            a.connects_attempted,
            a.connects_per_sec,
            a.connects_established,
            counts(&a.connect_failures)
        );
        println!(
            "attacker: closed by the server {} (open for p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms); answers before the close: {}",
            a.closed_by_server,
            a.lifetime_ms.p50,
            a.lifetime_ms.p90,
            a.lifetime_ms.max,
            counts(&a.answers_before_close)
        );
        if let Some(b) = &self.baseline {
            println!(
                "purchases' p99: {} ms during the attack, {} ms in the {:.0} s before it without: {}",
                ms(self.purchases.p99_ms),
                ms(b.purchases.p99_ms),
                b.seconds,
                self.purchases_p99_ratio()
                    .map_or_else(|| "no ratio".into(), |r| format!("{r:.2} times"))
            );
        }
    }
}

/// A latency, or `unanswered` where the percentile falls on a request with no answer.
fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "unanswered".into(), |v| format!("{v:.1}"))
}

fn counts(map: &BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("  ")
}
