//! The targets' metrics over the run: every `every`, each target's `/metrics` is read
//! and the series of the families asked for are kept, on the ledger's clock, so that a
//! reader can set a gauge (the shedding limit, the breaker's state) beside the phases.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

/// One target's series at one instant.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the measured phase began.
    pub t_s: f64,
    pub target: usize,
    /// Series (name and labels, as exposed) → value; empty when the target did not
    /// answer.
    pub series: BTreeMap<String, f64>,
}

/// The series of `text` (Prometheus exposition format) whose name, labels included,
/// starts with one of `prefixes`: `seckill_shedding` keeps the family's every series,
/// `seckill_limiter_mode{mode="local"` one mode's.
pub(crate) fn series(text: &str, prefixes: &[String]) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            prefixes
                .iter()
                .any(|p| name.starts_with(p.as_str()))
                .then(|| Some((name.to_string(), value.parse().ok()?)))?
        })
        .collect()
}

/// Samples every target until `deadline`.
pub(crate) async fn sample(
    client: &reqwest::Client,
    targets: &[String],
    families: &[String],
    every: Duration,
    start: Instant,
    deadline: Instant,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while Instant::now() < deadline {
        tick.tick().await;
        let t_s = start.elapsed().as_secs_f64();
        let reads = targets.iter().map(|target| async move {
            let text = client
                .get(format!("{target}/metrics"))
                .timeout(Duration::from_secs(1))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            Some(series(&text, families))
        });
        for (target, read) in futures_util::future::join_all(reads)
            .await
            .into_iter()
            .enumerate()
        {
            samples.push(Sample {
                t_s,
                target,
                series: read.unwrap_or_default(),
            });
        }
    }
    samples
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_families_asked_for_are_kept() {
        let text = "# HELP seckill_shedding_limit x\n\
                    # TYPE seckill_shedding_limit gauge\n\
                    seckill_shedding_limit 20\n\
                    seckill_shedding_shed_total 7\n\
                    seckill_limiter_mode{mode=\"local\",policy=\"limited\"} 1\n\
                    seckill_limiter_mode{mode=\"redis\",policy=\"limited\"} 0\n\
                    seckill_orders_breaker_state 1\n";
        let kept = series(
            text,
            &[
                "seckill_shedding".into(),
                "seckill_limiter_mode{mode=\"local\"".into(),
            ],
        );
        assert_eq!(kept.len(), 3);
        assert_eq!(kept["seckill_shedding_limit"], 20.0);
        assert_eq!(kept["seckill_shedding_shed_total"], 7.0);
        assert_eq!(
            kept["seckill_limiter_mode{mode=\"local\",policy=\"limited\"}"],
            1.0
        );
    }
}
