//! Exactness over two instances (one Redis prefix, one database): a crowd in a random
//! room's pre-queue, each shopper polling its home instance and buying 0.2-2 s after
//! its pass; `kill_after` past the sale's start the run writes `kill_file`, and the
//! script that started the instances SIGKILLs the first one. A shopper whose instance
//! stops answering moves to the other. Checked from what the clients saw and from the
//! stores:
//! - no place admitted twice: every admitted answer's place (its position, and the
//!   place its pass names) belongs to one user, and each user was admitted at one place;
//! - the survivor keeps admitting after the kill;
//! - units sold = orders: the load generator's store checks (every 200 has its order,
//!   one order per user, Redis stock + pending + orders = stock), after the reconciler
//!   has settled what the killed instance left pending;
//! - every order used its pass once: the survivor's `passes used` counter equals the
//!   200s it answered (the killed instance's counter dies with it: its last sample is
//!   reported beside its 200s).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;

use loadtest_core::stores::{self, Stores};

use crate::behaviour::{everyone, Clicks, InRoom, Plan};
use crate::crowd::log_in;
use crate::figures::{check, Check, Lines, ScenarioReport};
use crate::seconds_after;
use crate::seen::{Ledger, State};
use crate::shopper::Run;
use crate::site::{counter, passes_used, RoomFigures, RoomSettings, Site};

#[derive(Debug, Clone)]
pub struct Exactness {
    pub shoppers: u32,
    pub first_user: i64,
    pub first_ip: u32,
    pub stock: i64,
    pub admit_per_second: u32,
    pub max_active: u32,
    /// From the item's creation to the sale's start: the crowd joins in its first half.
    pub lead: Duration,
    /// From the sale's start to the kill.
    pub kill_after: Duration,
    /// Written when the first target is to be killed.
    pub kill_file: PathBuf,
    /// The run ends this long after the start at the latest.
    pub after_start: Duration,
    pub seed: u64,
    pub stores: Stores,
}

/// What the sampler last read from an instance.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Reading {
    /// Seconds from the sale's start.
    pub at_s: f64,
    pub passes_used: f64,
    pub admissions: f64,
}

#[derive(Debug, Serialize)]
pub struct ExactnessFigures {
    pub shoppers: u32,
    pub stock: i64,
    pub kill_at_s: f64,
    /// The first sample at which the killed instance no longer answered.
    pub death_seen_at_s: Option<f64>,
    pub admitted_places: usize,
    pub places_with_two_users: usize,
    pub users_with_two_places: usize,
    pub passes_not_matching_their_poll: usize,
    /// The survivor's view: admitted when the kill was asked for, the first sample after
    /// it that had admitted more, and at the end.
    pub survivor_admitted_at_kill: u64,
    pub survivor_next_admission_after_s: Option<f64>,
    pub survivor_at_end: RoomFigures,
    pub answers_200: BTreeMap<String, u64>,
    pub survivor_passes_used: f64,
    pub killed_last_reading: Reading,
    /// The killed instance's 200s answered after its last reading.
    pub killed_200_after_last_reading: u64,
    pub orders: Option<u64>,
    pub polls: u64,
    pub endings: BTreeMap<&'static str, u64>,
}

impl Lines for ExactnessFigures {
    fn lines(&self) -> Vec<String> {
        vec![
            format!(
                "{} shoppers, {} units; instance 0 killed at {:.1} s after the start (gone at {}); endings {:?}",
                self.shoppers,
                self.stock,
                self.kill_at_s,
                self.death_seen_at_s.map_or("-".into(), |s| format!("{s:.2} s")),
                self.endings
            ),
            format!(
                "{} places admitted; places with two users {}, users with two places {}, passes not matching their poll {}",
                self.admitted_places,
                self.places_with_two_users,
                self.users_with_two_places,
                self.passes_not_matching_their_poll
            ),
            format!(
                "survivor: {} admitted at the kill, next admission {} later, at the end admitted {} serving {} sold out {}",
                self.survivor_admitted_at_kill,
                self.survivor_next_admission_after_s
                    .map_or("never".into(), |s| format!("{s:.2} s")),
                self.survivor_at_end.admitted,
                self.survivor_at_end.serving,
                self.survivor_at_end.sold_out
            ),
            format!(
                "200s by instance {:?}; passes used: survivor {:.0}, killed {:.0} at its last reading ({:.2} s, {} of its 200s came after); orders {}",
                self.answers_200,
                self.survivor_passes_used,
                self.killed_last_reading.passes_used,
                self.killed_last_reading.at_s,
                self.killed_200_after_last_reading,
                self.orders.map_or("-".into(), |o| o.to_string())
            ),
        ]
    }
}

pub async fn run(
    site: Site,
    config: Exactness,
) -> anyhow::Result<ScenarioReport<ExactnessFigures>> {
    anyhow::ensure!(site.targets.len() == 2, "two targets: the first is killed");
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
        pass_ttl_secs: 120,
        abandon_after_secs: 60,
    };
    site.set_room(item, &settings).await?;
    site.until_listed(item, true).await?;
    let run = Arc::new(Run::new(site, item, false));
    let start = run.start + (starts_at - Utc::now()).to_std().unwrap_or_default();
    let deadline = start + config.after_start;
    let kill_at = start + config.kill_after;
    let sampler = tokio::spawn(sample(
        Arc::clone(&run),
        start,
        kill_at,
        deadline,
        config.kill_file.clone(),
    ));
    let join_within = config.lead / 2;
    let endings = everyone(&run, &accounts, config.seed, deadline, |_, dice| {
        Plan::Room(InRoom {
            join_at: dice.between(Duration::ZERO, join_within),
            poll_every: None,
            reaction: Some((Duration::from_millis(200), Duration::from_secs(2))),
            clicks: Clicks {
                tries: 5,
                pause: (Duration::from_secs(1), Duration::from_secs(2)),
                early_every: Duration::from_secs(1),
                fresh: true,
            },
        })
    })
    .await?;
    let sampled = sampler.await??;
    let ledger = run.seen.take();
    let survivor = &run.site.targets[1..];
    let reconciled = stores::await_reconciliation(
        &run.site.client,
        survivor,
        &config.stores,
        item,
        Duration::from_secs(120),
    )
    .await;
    let at_end = run.site.room(1, item).await.unwrap_or_default();
    let survivor_metrics = run.site.metrics(1).await.unwrap_or_default();

    let places = places(&ledger);
    let mut answers_200: BTreeMap<String, u64> = BTreeMap::new();
    let last = sampled.last[0];
    let mut killed_after_last = 0;
    for bought in ledger.bought.iter().filter(|b| b.record.status == 200) {
        *answers_200
            .entry(format!("instance {}", bought.target))
            .or_default() += 1;
        if bought.target == 0
            && seconds_after(start, run.start + bought.record.received) > last.at_s
        {
            killed_after_last += 1;
        }
    }
    let survivor_200 = answers_200.get("instance 1").copied().unwrap_or(0);
    let survivor_used = passes_used(&survivor_metrics);
    let records = ledger.records();
    let mut store = match &reconciled {
        Ok(_) => stores::store_checks(&config.stores, item, 0, &records).await?,
        Err(e) => vec![check("reconciled", false, format!("{e:#}"))],
    };
    let orders = stores::order_count(&config.stores, item).await.ok();
    let mut endings_count = BTreeMap::new();
    for (_, ending) in &endings {
        *endings_count.entry(ending.label()).or_default() += 1u64;
    }
    let next_admission = sampled.survivor.iter().find(|(at, room)| {
        *at > seconds_after(start, kill_at) && room.admitted > sampled.admitted_at_kill
    });
    let figures = ExactnessFigures {
        shoppers: config.shoppers,
        stock: config.stock,
        kill_at_s: config.kill_after.as_secs_f64(),
        death_seen_at_s: sampled.death_seen_at,
        admitted_places: places.by_place.len(),
        places_with_two_users: places.by_place.values().filter(|u| u.len() > 1).count(),
        users_with_two_places: places.by_user.values().filter(|p| p.len() > 1).count(),
        passes_not_matching_their_poll: places.mismatched,
        survivor_admitted_at_kill: sampled.admitted_at_kill,
        survivor_next_admission_after_s: next_admission
            .map(|(at, _)| at - config.kill_after.as_secs_f64()),
        survivor_at_end: at_end,
        answers_200,
        survivor_passes_used: survivor_used,
        killed_last_reading: last,
        killed_200_after_last_reading: killed_after_last,
        orders: orders.map(|o| o as u64),
        polls: ledger.polls,
        endings: endings_count,
    };
    let mut checks: Vec<Check> = vec![
        check(
            "an instance died mid-queue",
            figures.death_seen_at_s.is_some() && sampled.admitted_at_kill > 0 && sampled.admitted_at_kill < config.stock as u64,
            format!(
                "kill asked at {:.1} s, instance 0 gone at {:?} s, {} admitted then",
                figures.kill_at_s, figures.death_seen_at_s, sampled.admitted_at_kill
            ),
        ),
        check(
            "no place admitted twice",
            figures.places_with_two_users == 0
                && figures.users_with_two_places == 0
                && figures.passes_not_matching_their_poll == 0,
            format!(
                "{} places admitted (from {} admitted answers): {} with two users, {} users with two places, {} passes naming another place or user",
                figures.admitted_places,
                places.answers,
                figures.places_with_two_users,
                figures.users_with_two_places,
                figures.passes_not_matching_their_poll
            ),
        ),
        check(
            "the survivor keeps admitting",
            next_admission.is_some() && at_end.admitted > sampled.admitted_at_kill,
            format!(
                "{} admitted at the kill, {} at the end; the next admission {}",
                sampled.admitted_at_kill,
                at_end.admitted,
                figures
                    .survivor_next_admission_after_s
                    .map_or("never came".into(), |s| format!("{s:.2} s after the kill"))
            ),
        ),
        check(
            "passes used = the survivor's orders",
            survivor_used as u64 == survivor_200,
            format!(
                "the survivor counted {survivor_used:.0} passes used and answered {survivor_200} purchases 200; the killed instance counted {:.0} at its last reading, {killed_after_last} of its 200s came later",
                last.passes_used
            ),
        ),
    ];
    if let Ok(waited) = reconciled {
        checks.push(check("reconciled", true, waited));
    }
    checks.append(&mut store);
    Ok(ScenarioReport {
        scenario: "exactness, two instances, one SIGKILLed",
        figures,
        checks,
    })
}

/// Who was admitted where, from every admitted answer.
struct Places {
    answers: usize,
    by_place: BTreeMap<u64, BTreeSet<i64>>,
    by_user: BTreeMap<i64, BTreeSet<u64>>,
    /// Passes naming another user or place than the poll that handed them out.
    mismatched: usize,
}

fn places(ledger: &Ledger) -> Places {
    let mut places = Places {
        answers: 0,
        by_place: BTreeMap::new(),
        by_user: BTreeMap::new(),
        mismatched: 0,
    };
    for poll in ledger.polled.iter().filter(|p| p.state == State::Admitted) {
        let Some(position) = poll.position else {
            continue;
        };
        let place = position - 1;
        places.answers += 1;
        places.by_place.entry(place).or_default().insert(poll.user);
        places.by_user.entry(poll.user).or_default().insert(place);
        if let Some(pass) = poll.pass {
            if pass.user != poll.user || pass.place != place {
                places.mismatched += 1;
            }
            places
                .by_place
                .entry(pass.place)
                .or_default()
                .insert(pass.user);
        }
    }
    places
}

/// What the sampler saw.
struct Sampled {
    /// The last reading of each instance.
    last: [Reading; 2],
    death_seen_at: Option<f64>,
    admitted_at_kill: u64,
    /// The survivor's view of the room: (seconds from the start, figures).
    survivor: Vec<(f64, RoomFigures)>,
}

/// Every 250 ms: each instance's counters, and the survivor's view of the room; at
/// `kill_at`, the kill file.
async fn sample(
    run: Arc<Run>,
    start: Instant,
    kill_at: Instant,
    deadline: Instant,
    kill_file: PathBuf,
) -> anyhow::Result<Sampled> {
    let mut sampled = Sampled {
        last: [Reading::default(); 2],
        death_seen_at: None,
        admitted_at_kill: 0,
        survivor: Vec::new(),
    };
    let mut killed = false;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    while Instant::now() < deadline {
        tick.tick().await;
        let at_s = seconds_after(start, Instant::now());
        if !killed && Instant::now() >= kill_at {
            std::fs::write(&kill_file, b"")?;
            killed = true;
            sampled.admitted_at_kill = sampled.survivor.last().map_or(0, |(_, r)| r.admitted);
        }
        for target in 0..2 {
            match run.site.metrics(target).await {
                Some(text) => {
                    sampled.last[target] = Reading {
                        at_s,
                        passes_used: passes_used(&text),
                        admissions: counter(&text, "seckill_queue_admissions_total", &[]),
                    }
                }
                None if killed && target == 0 && sampled.death_seen_at.is_none() => {
                    sampled.death_seen_at = Some(at_s);
                }
                None => {}
            }
        }
        if let Ok(room) = run.site.room(1, run.item).await {
            sampled.survivor.push((at_s, room));
        }
    }
    Ok(sampled)
}
