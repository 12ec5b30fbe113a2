//! Fairness: a crowd in which bot operators hold a share of the accounts, at a sale of
//! `stock` units, either through the room (random order, everyone joining in the
//! pre-queue, shuffled at the start) or straight at `POST /seckill`. The figure is the
//! units each operator bought; with the room, the bots' units should lie inside the
//! 99 % binomial interval around their share of the accounts.
//!
//! Humans, with the room: join at a random moment of the pre-queue, poll every
//! `refreshIntervalSeconds` on a new connection, and click 1-4 s after seeing their
//! pass (3 tries, 2-5 s apart). Bots: join the moment the pre-queue opens, poll every
//! `bot_poll` on kept connections, buy the moment they see a pass, retrying whatever a
//! limit refuses as soon as it says. Without the room: humans click 0.5-4 s after the
//! start, up to 3 times, 2-5 s apart; bots fire from half a second before the start,
//! again as soon as each answer allows, until bought or sold out.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde::Serialize;

use loadtest_core::stores::{store_checks, Stores};

use crate::behaviour::{everyone, Clicks, InRoom, Plan, Rush};
use crate::crowd::{log_in, Holder};
use crate::figures::{check, median, Check, Lines, ScenarioReport};
use crate::shopper::Run;
use crate::site::{passes_used, queue_calls, RoomFigures, RoomSettings, Site};

/// A pass's lifetime in the room: long enough for any human's reaction.
const PASS_TTL_SECS: u32 = 120;

#[derive(Debug, Clone)]
pub struct Fairness {
    /// Through the room, or straight at the sale.
    pub room: bool,
    pub humans: u32,
    pub operators: u32,
    pub per_operator: u32,
    pub first_user: i64,
    pub first_ip: u32,
    pub stock: i64,
    /// From the item's creation to the sale's start: the pre-queue, with the room.
    pub lead: Duration,
    pub admit_per_second: u32,
    pub max_active: u32,
    /// Between two polls of a bot.
    pub bot_poll: Duration,
    /// The run ends this long after the start at the latest.
    pub after_start: Duration,
    pub seed: u64,
    /// Orders and stock are checked against the stores when given.
    pub stores: Option<Stores>,
}

/// How one kind of holder fared.
#[derive(Debug, Default, Serialize)]
pub struct Side {
    pub accounts: u64,
    pub units: u64,
    /// Accounts whose place was admitted as their polls saw (room only): a place
    /// admitted after the shopper's last poll before the sale sold out goes unseen.
    pub admitted: u64,
    /// Medians (ms), room only: from the admission (the pass's expiry less its
    /// lifetime, within ±0.5 s) to the first poll that showed the pass, and to the 200.
    pub admission_to_seen_p50_ms: Option<f64>,
    pub admission_to_order_p50_ms: Option<f64>,
    pub endings: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Serialize)]
pub struct FairnessFigures {
    pub with_room: bool,
    pub stock: i64,
    pub units_sold: u64,
    pub units_per_operator: Vec<u64>,
    pub humans: Side,
    pub bots: Side,
    /// The bots' share of the accounts, and the units it would buy them by chance.
    pub bot_share_of_accounts: f64,
    pub expected_bot_units: f64,
    /// The 99 % binomial interval around `expected_bot_units`.
    pub interval: (f64, f64),
    pub joins: u64,
    pub polls: u64,
    pub polls_per_sec: f64,
    /// Purchases by answer (`200`, `409 SOLD_OUT`, `429 user`, ...).
    pub purchases: BTreeMap<String, u64>,
    /// The room's Redis calls over the run (one per join included), and the others
    /// (lobby refreshes, liveness writes, the inlet) per poll.
    pub queue_redis_calls: f64,
    pub queue_calls_per_poll: Option<f64>,
    pub passes_used: f64,
    /// The room at the end, as the instance saw it (room only): places admitted in all.
    pub room_at_end: Option<RoomFigures>,
    pub seconds: f64,
}

impl Lines for FairnessFigures {
    fn lines(&self) -> Vec<String> {
        let room = if self.with_room {
            "with the room"
        } else {
            "without the room"
        };
        let side = |name: &str, s: &Side| {
            let delay = match (s.admission_to_seen_p50_ms, s.admission_to_order_p50_ms) {
                (Some(seen), Some(order)) => format!(
                    ", from admission to seeing the pass p50 {seen:.0} ms, to the order {order:.0} ms"
                ),
                _ => String::new(),
            };
            format!(
                "{name}: {} accounts, {} units, {} admitted{delay}, endings {:?}",
                s.accounts, s.units, s.admitted, s.endings
            )
        };
        vec![
            format!(
                "{room}: {} units sold of {}; per operator {:?}",
                self.units_sold, self.stock, self.units_per_operator
            ),
            format!(
                "bots {} units, humans {}; bots hold {:.1} % of the accounts: {:.1} expected, 99 % interval [{:.1}, {:.1}]",
                self.bots.units,
                self.humans.units,
                self.bot_share_of_accounts * 100.0,
                self.expected_bot_units,
                self.interval.0,
                self.interval.1
            ),
            side("humans", &self.humans),
            side("bots", &self.bots),
            format!(
                "{} joins, {} polls ({:.0}/s) in {:.1} s; purchases {:?}",
                self.joins, self.polls, self.polls_per_sec, self.seconds, self.purchases
            ),
            format!(
                "room Redis calls {:.0} (besides the joins, {} per poll), passes used {:.0}, room at the end {}",
                self.queue_redis_calls,
                self.queue_calls_per_poll
                    .map_or("-".into(), |c| format!("{c:.5}")),
                self.passes_used,
                self.room_at_end.map_or("-".into(), |r| format!(
                    "{} admitted, {} abandoned, serving {}",
                    r.admitted, r.abandoned, r.serving
                ))
            ),
        ]
    }
}

pub async fn run(site: Site, config: Fairness) -> anyhow::Result<ScenarioReport<FairnessFigures>> {
    let accounts = log_in(
        &site,
        config.first_user,
        config.first_ip,
        config.humans,
        config.operators,
        config.per_operator,
    )
    .await?;
    let created = Utc::now();
    let starts_at = created + chrono::Duration::from_std(config.lead)?;
    let item = site.create_item(config.stock, starts_at).await?;
    if config.room {
        let settings = RoomSettings {
            random: true,
            prequeue_from: Some(created - chrono::Duration::seconds(5)),
            admit_per_second: config.admit_per_second,
            max_active: config.max_active,
            pass_ttl_secs: PASS_TTL_SECS,
            abandon_after_secs: 60,
        };
        site.set_room(item, &settings).await?;
    }
    site.until_listed(item, config.room).await?;
    let metrics_before = site.metrics(0).await.unwrap_or_default();
    let run = Arc::new(Run::new(site, item, false));
    let to_start = (starts_at - Utc::now()).to_std().unwrap_or_default();
    let deadline = run.start + to_start + config.after_start;
    let human_clicks = Clicks {
        tries: 3,
        pause: (Duration::from_secs(2), Duration::from_secs(5)),
        early_every: Duration::from_secs(1),
        fresh: true,
    };
    let bot_clicks = Clicks {
        tries: u32::MAX,
        pause: (Duration::ZERO, Duration::ZERO),
        early_every: Duration::from_millis(20),
        fresh: false,
    };
    let room = config.room;
    let bot_poll = config.bot_poll;
    let endings = everyone(&run, &accounts, config.seed, deadline, |who, dice| {
        match (room, who.holder) {
            (true, Holder::Human) => Plan::Room(InRoom {
                join_at: dice.between(
                    Duration::ZERO,
                    to_start.saturating_sub(Duration::from_secs(5)),
                ),
                poll_every: None,
                reaction: Some((Duration::from_secs(1), Duration::from_secs(4))),
                clicks: human_clicks,
            }),
            (true, Holder::Bot(_)) => Plan::Room(InRoom {
                join_at: Duration::ZERO,
                poll_every: Some(bot_poll),
                reaction: Some((Duration::ZERO, Duration::ZERO)),
                clicks: bot_clicks,
            }),
            (false, Holder::Human) => Plan::Rush(Rush {
                first_at: to_start
                    + dice.between(Duration::from_millis(500), Duration::from_secs(4)),
                clicks: human_clicks,
            }),
            (false, Holder::Bot(_)) => Plan::Rush(Rush {
                first_at: to_start.saturating_sub(Duration::from_millis(500)),
                clicks: bot_clicks,
            }),
        }
    })
    .await?;
    let seconds = run.start.elapsed().as_secs_f64();
    let metrics_after = run.site.metrics(0).await.unwrap_or_default();
    let room_at_end = if config.room {
        Some(run.site.room(0, item).await?)
    } else {
        None
    };
    let ledger = run.seen.take();

    // Units by holder, from the answers.
    let holder_of: BTreeMap<i64, Holder> = accounts.iter().map(|a| (a.user, a.holder)).collect();
    let mut per_operator = vec![0u64; config.operators as usize];
    let (mut humans, mut bots) = (Side::default(), Side::default());
    for account in &accounts {
        match account.holder {
            Holder::Human => humans.accounts += 1,
            Holder::Bot(_) => bots.accounts += 1,
        }
    }
    for (holder, ending) in &endings {
        let side = if *holder == Holder::Human {
            &mut humans
        } else {
            &mut bots
        };
        *side.endings.entry(ending.label()).or_default() += 1;
    }
    let mut purchases: BTreeMap<String, u64> = BTreeMap::new();
    let mut ordered_at: BTreeMap<i64, Duration> = BTreeMap::new();
    for bought in &ledger.bought {
        let r = &bought.record;
        let key = match (&r.code, &r.dimension) {
            (_, Some(dimension)) => format!("{} {dimension}", r.status),
            (Some(code), None) => format!("{} {code}", r.status),
            (None, None) => r.status.to_string(),
        };
        *purchases.entry(key).or_default() += 1;
        if r.status != 200 {
            continue;
        }
        ordered_at.insert(r.user, r.received);
        match bought.holder {
            Holder::Human => humans.units += 1,
            Holder::Bot(n) => {
                bots.units += 1;
                per_operator[n as usize] += 1;
            }
        }
    }
    // (to seeing the pass, to the order) per side, from the admission.
    let mut delays: BTreeMap<bool, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for first in ledger.first_admissions() {
        let bot = matches!(holder_of.get(&first.user), Some(Holder::Bot(_)));
        if bot {
            bots.admitted += 1;
        } else {
            humans.admitted += 1;
        }
        let Some(pass) = first.pass else { continue };
        // The pass is valid through the second of its `exp`: admitted within the second
        // that ends `passTtlSecs` before its expiry; the middle of that second.
        let admitted_ms = (pass.expires_at + 1 - i64::from(PASS_TTL_SECS)) * 1000 + 500;
        let (seen, ordered) = delays.entry(bot).or_default();
        seen.push((run.unix_ms(first.received) - admitted_ms) as f64);
        if let Some(at) = ordered_at.get(&first.user) {
            ordered.push((run.unix_ms(*at) - admitted_ms) as f64);
        }
    }
    for (bot, side) in [(false, &mut humans), (true, &mut bots)] {
        if let Some((seen, ordered)) = delays.get(&bot) {
            side.admission_to_seen_p50_ms = (!seen.is_empty()).then(|| median(seen));
            side.admission_to_order_p50_ms = (!ordered.is_empty()).then(|| median(ordered));
        }
    }

    let units_sold = humans.units + bots.units;
    let share = bots.accounts as f64 / accounts.len().max(1) as f64;
    let n = units_sold as f64;
    let expected = n * share;
    let half = 2.576 * (n * share * (1.0 - share)).sqrt();
    let interval = (expected - half, expected + half);
    let calls = queue_calls(&metrics_after) - queue_calls(&metrics_before);
    let used = passes_used(&metrics_after) - passes_used(&metrics_before);
    let figures = FairnessFigures {
        with_room: config.room,
        stock: config.stock,
        units_sold,
        units_per_operator: per_operator,
        bot_share_of_accounts: share,
        expected_bot_units: expected,
        interval,
        joins: ledger.joins.len() as u64,
        polls: ledger.polls,
        polls_per_sec: ledger.polls as f64 / seconds,
        purchases,
        queue_redis_calls: calls,
        queue_calls_per_poll: (ledger.polls > 0).then(|| {
            let joined = ledger.joins.iter().filter(|j| j.status == 200).count();
            (calls - joined as f64) / ledger.polls as f64
        }),
        room_at_end,
        passes_used: used,
        seconds,
        humans,
        bots,
    };

    let mut checks: Vec<Check> = Vec::new();
    let inside = (interval.0..=interval.1).contains(&(figures.bots.units as f64));
    let detail = format!(
        "bots bought {} of {units_sold} units; the 99 % interval around {:.1} % of the accounts is [{:.1}, {:.1}]",
        figures.bots.units,
        share * 100.0,
        interval.0,
        interval.1
    );
    if config.room {
        checks.push(check(
            "bots' units within the 99 % interval",
            inside,
            detail,
        ));
        checks.push(check(
            "passes used = orders",
            used as u64 == units_sold,
            format!("{used:.0} passes used (metric), {units_sold} answers 200"),
        ));
    } else {
        // Without the room there is no goal: the figure is what speed buys.
        checks.push(check("what speed buys (no goal)", true, detail));
    }
    if let Some(stores) = &config.stores {
        let records = ledger.records();
        checks.extend(store_checks(stores, item, 0, &records).await?);
    }
    Ok(ScenarioReport {
        scenario: if config.room {
            "fairness, with the room"
        } else {
            "fairness, without the room"
        },
        figures,
        checks,
    })
}
