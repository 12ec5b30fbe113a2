//! The inlet: a room whose crowd joined in the pre-queue and keeps polling (every
//! `refreshIntervalSeconds`, passes never used), measured from the sale's start for
//! `measure` by sampling the admin view (`status.admitted`, `status.livePasses`) every
//! `sample_every`. With `maxActive` out of the way the figure is admissions per second
//! against `admitPerSecond`; with a `maxActive` the unused passes reach, live passes
//! must never exceed it (and do reach it: the cap binds).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;

use crate::behaviour::{everyone, Clicks, InRoom, Plan};
use crate::crowd::log_in;
use crate::figures::{check, median, percentile, Lines, ScenarioReport};
use crate::seconds_after;
use crate::shopper::Run;
use crate::site::{RoomFigures, RoomSettings, Site};

#[derive(Debug, Clone)]
pub struct Inlet {
    pub shoppers: u32,
    pub first_user: i64,
    pub first_ip: u32,
    pub stock: i64,
    pub admit_per_second: u32,
    pub max_active: u32,
    pub pass_ttl_secs: u32,
    /// From the item's creation to the sale's start: the crowd joins in its first half.
    pub lead: Duration,
    /// Measured from one second after the start (the first second banks its credit).
    pub measure: Duration,
    pub sample_every: Duration,
    /// Judge the rate (±5 % of `admit_per_second`); else only the cap.
    pub rate_goal: bool,
    pub seed: u64,
}

/// One sample of the admin view.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds from the sale's start.
    pub at_s: f64,
    pub room: RoomFigures,
}

#[derive(Debug, Serialize)]
pub struct InletFigures {
    pub shoppers: u32,
    pub joined: u64,
    pub admit_per_second: u32,
    pub max_active: u32,
    pub pass_ttl_secs: u32,
    /// Admissions over the window ÷ its length.
    pub admitted_per_sec: f64,
    pub window_s: (f64, f64),
    /// Admissions in each whole second of the window: min, 5th, 50th, 95th
    /// percentile, max.
    pub per_second: [f64; 5],
    pub live_passes_max: u64,
    /// Share of the window's samples at `maxActive`.
    pub at_cap_share: f64,
    /// Fewest shoppers waiting in any sample of the window (0: the crowd ran out).
    pub waiting_min: u64,
    pub abandoned: u64,
    pub samples: usize,
    pub polls: u64,
}

impl Lines for InletFigures {
    fn lines(&self) -> Vec<String> {
        vec![
            format!(
                "admitPerSecond {}, maxActive {}, pass {} s: {:.2} admitted/s over {:.1}-{:.1} s after the start; per second min/p5/p50/p95/max {:?}",
                self.admit_per_second,
                self.max_active,
                self.pass_ttl_secs,
                self.admitted_per_sec,
                self.window_s.0,
                self.window_s.1,
                self.per_second
            ),
            format!(
                "live passes max {} ({:.0} % of the samples at the cap), fewest waiting {}, abandoned {}, {} shoppers joined, {} polls, {} samples",
                self.live_passes_max,
                self.at_cap_share * 100.0,
                self.waiting_min,
                self.abandoned,
                self.joined,
                self.polls,
                self.samples
            ),
        ]
    }
}

pub async fn run(site: Site, config: Inlet) -> anyhow::Result<ScenarioReport<InletFigures>> {
    let accounts = log_in(
        &site,
        config.first_user,
        config.first_ip,
        config.shoppers,
        0,
        1,
    )
    .await?;
    let created = Utc::now();
    let starts_at = created + chrono::Duration::from_std(config.lead)?;
    let item = site.create_item(config.stock, starts_at).await?;
    let settings = RoomSettings {
        random: true,
        prequeue_from: Some(created - chrono::Duration::seconds(5)),
        admit_per_second: config.admit_per_second,
        max_active: config.max_active,
        pass_ttl_secs: config.pass_ttl_secs,
        abandon_after_secs: 60,
    };
    site.set_room(item, &settings).await?;
    site.until_listed(item, true).await?;
    let run = Arc::new(Run::new(site, item, false));
    let to_start = (starts_at - Utc::now()).to_std().unwrap_or_default();
    let start = run.start + to_start;
    let deadline = start + config.measure + Duration::from_secs(2);
    let sampler = {
        let (run, every) = (Arc::clone(&run), config.sample_every);
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval(every);
            while Instant::now() < deadline {
                tick.tick().await;
                let at = Instant::now();
                if let Ok(room) = run.site.room(0, run.item).await {
                    samples.push(Sample {
                        at_s: seconds_after(start, at),
                        room,
                    });
                }
            }
            samples
        })
    };
    let join_within = config.lead / 2;
    everyone(&run, &accounts, config.seed, deadline, |_, dice| {
        Plan::Room(InRoom {
            join_at: dice.between(Duration::ZERO, join_within),
            poll_every: None,
            reaction: None,
            clicks: Clicks {
                tries: 0,
                pause: (Duration::ZERO, Duration::ZERO),
                early_every: Duration::from_secs(1),
                fresh: true,
            },
        })
    })
    .await?;
    let samples = sampler.await?;
    let ledger = run.seen.take();
    let joined = ledger.joins.iter().filter(|j| j.status == 200).count() as u64;

    let from = 1.0;
    let to = from + config.measure.as_secs_f64();
    let window: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at_s >= from && s.at_s <= to)
        .collect();
    let (first, last) = match (window.first(), window.last()) {
        (Some(f), Some(l)) if l.at_s > f.at_s => (*f, *l),
        _ => anyhow::bail!("no samples over the window ({} in all)", samples.len()),
    };
    let rate = (last.room.admitted - first.room.admitted) as f64 / (last.at_s - first.at_s);
    // Each whole second: the samples nearest its two ends.
    let admitted_at = |t: f64| {
        window
            .iter()
            .min_by(|a, b| (a.at_s - t).abs().total_cmp(&(b.at_s - t).abs()))
            .map(|s| (s.at_s, s.room.admitted))
    };
    let mut per_second = Vec::new();
    let mut t = first.at_s;
    while t + 1.0 <= last.at_s {
        if let (Some((a, x)), Some((b, y))) = (admitted_at(t), admitted_at(t + 1.0)) {
            if b > a {
                per_second.push((y - x) as f64 / (b - a));
            }
        }
        t += 1.0;
    }
    let live_max = samples
        .iter()
        .map(|s| s.room.live_passes)
        .max()
        .unwrap_or(0);
    let at_cap = window
        .iter()
        .filter(|s| s.room.live_passes >= u64::from(config.max_active))
        .count();
    let figures = InletFigures {
        shoppers: config.shoppers,
        joined,
        admit_per_second: config.admit_per_second,
        max_active: config.max_active,
        pass_ttl_secs: config.pass_ttl_secs,
        admitted_per_sec: rate,
        window_s: (first.at_s, last.at_s),
        per_second: [
            percentile(&per_second, 0.0),
            percentile(&per_second, 5.0),
            median(&per_second),
            percentile(&per_second, 95.0),
            percentile(&per_second, 100.0),
        ],
        live_passes_max: live_max,
        at_cap_share: at_cap as f64 / window.len() as f64,
        waiting_min: window.iter().map(|s| s.room.waiting).min().unwrap_or(0),
        abandoned: samples.last().map_or(0, |s| s.room.abandoned),
        samples: samples.len(),
        polls: ledger.polls,
    };
    let mut checks = vec![check(
        "live passes never above maxActive",
        live_max <= u64::from(config.max_active),
        format!(
            "max {live_max} of {} over {} samples every {} ms",
            config.max_active,
            samples.len(),
            config.sample_every.as_millis()
        ),
    )];
    let target = f64::from(config.admit_per_second);
    if config.rate_goal {
        checks.push(check(
            "admissions per second within ±5 % of admitPerSecond",
            (rate - target).abs() <= 0.05 * target,
            format!(
                "{rate:.2}/s against {target}/s over {:.1} s ({:+.1} %)",
                last.at_s - first.at_s,
                (rate / target - 1.0) * 100.0
            ),
        ));
        checks.push(check(
            "shoppers waiting throughout",
            figures.waiting_min > 0 && figures.abandoned == 0,
            format!(
                "fewest waiting {}, abandoned {}",
                figures.waiting_min, figures.abandoned
            ),
        ));
    } else {
        checks.push(check(
            "the cap binds",
            live_max == u64::from(config.max_active),
            format!(
                "{:.0} % of the samples at {}; {:.2} admitted/s",
                figures.at_cap_share * 100.0,
                config.max_active,
                rate
            ),
        ));
    }
    Ok(ScenarioReport {
        scenario: if config.rate_goal {
            "inlet rate"
        } else {
            "inlet cap"
        },
        figures,
        checks,
    })
}
