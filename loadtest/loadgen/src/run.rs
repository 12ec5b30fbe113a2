//! A run from end to end: the setup, the load (with the side load and the metric
//! samples beside it), the report, then the checks of the limits (from the ledgers) and
//! of the stock and orders (from the stores).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use loadtest_core::client;
use loadtest_core::ledger::Record;
use loadtest_core::report::Check;
use loadtest_core::setup::{create_item, login, wait_until_listed_as};
use loadtest_core::stores::{self, order_count, store_checks};

use crate::config::{Config, ItemChoice, Options};
use crate::fallback_checks::fallback_checks;
use crate::limit_checks::limit_checks;
use crate::limits::{self, PURCHASE_POLICY};
use crate::policies::Policy;
use crate::report::{summarize, RunReport, SaleTotals};
use crate::request::Shared;
use crate::room::{Cast, RoomMode};
use crate::shopper::RoomSeen;
use crate::side::side_answers;
use crate::{outages, phases, progress, room, samples, schedule, side};

pub async fn run(config: Config) -> anyhow::Result<RunReport> {
    run_with(config, Options::default()).await
}

pub async fn run_with(config: Config, options: Options) -> anyhow::Result<RunReport> {
    anyhow::ensure!(!config.targets.is_empty(), "at least one target");
    anyhow::ensure!(
        config.users > 0 && config.ips > 0,
        "users and ips must be positive"
    );
    let room_plan = options.room.clone().filter(|_| config.probe.is_none());
    anyhow::ensure!(
        room_plan.is_none() || options.sales <= 1,
        "room mode drives one sale"
    );
    let client = client::client()?;
    let (item_ids, tokens, orders_before) = if config.probe.is_some() {
        (vec![0], HashMap::new(), None)
    } else {
        let item_ids = match &config.item {
            ItemChoice::Existing(id) => vec![*id],
            ItemChoice::Create { stock } => {
                let mut ids = Vec::new();
                for _ in 0..options.sales.max(1) {
                    let target = &config.targets[0];
                    ids.push(create_item(&client, target, *stock, &config.admin_token).await?);
                }
                ids
            }
        };
        if let Some(plan) = &room_plan {
            let target = &config.targets[0];
            room::turn_on(&client, target, &config.admin_token, item_ids[0], plan).await?;
        }
        for (i, item) in item_ids.iter().enumerate() {
            let room = (i == 0 && room_plan.is_some()).then_some(true);
            wait_until_listed_as(&client, &config.targets, *item, room).await?;
        }
        let item_id = item_ids[0];
        let orders_before = match &config.stores {
            Some(stores) => Some(order_count(stores, item_id).await?),
            None => None,
        };
        let users = (0..config.users).map(|i| config.first_user + i64::from(i));
        let tokens = login(&client, &session_target(&config, &options), users).await?;
        (item_ids, tokens, orders_before)
    };
    // The limits not given are the ones the service runs; the ceiling server has no
    // admin API, so they are read where the tokens come from.
    let limits = if config.probe.is_none() && limits::to_read(&config.limits) {
        let target = session_target(&config, &options);
        let policy = Policy::read(&client, &target, &config.admin_token, PURCHASE_POLICY).await?;
        limits::expectations(&config.limits, Some(&policy))
    } else {
        limits::expectations(&config.limits, None)
    };
    let item_id = item_ids[0];
    let side_plan = match &options.side {
        Some(load) if config.probe.is_none() => Some(
            side::prepare(
                &client,
                &config.targets[0],
                load,
                &config.admin_token,
                config.first_user + i64::from(config.users),
                options.first_ip.wrapping_add(config.ips),
            )
            .await?,
        ),
        _ => None,
    };
    // The shoppers come after the load's users and addresses and the side load's.
    let mut room_mode = match &room_plan {
        Some(plan) => {
            let session_target = session_target(&config, &options);
            let side_readers = options.side.as_ref().map_or(0, |s| s.orders_read_users);
            let cast = Cast {
                session_target: &session_target,
                targets: config.targets.len(),
                first_user: config.first_user + i64::from(config.users) + i64::from(side_readers),
                first_ip: options.first_ip.wrapping_add(config.ips).wrapping_add(1),
            };
            let stores = config.stores.as_ref();
            Some(RoomMode::prepare(&client, plan, cast, stores, item_id).await?)
        }
        None => None,
    };
    if let Some(path) = &options.started_file {
        std::fs::write(path, b"").with_context(|| format!("writing {}", path.display()))?;
    }
    let tokens = Arc::new(tokens);

    let ledger = Arc::new(Mutex::new(Vec::<Record>::new()));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let start_wall = std::time::SystemTime::now();
    let deadline = start + config.duration;
    let shared = Arc::new(Shared {
        client: client.clone(),
        config: config.clone(),
        tokens,
        item_ids,
        purchase_path: options.purchase_path.unwrap_or_else(|| "/seckill".into()),
        first_ip: options.first_ip,
        start,
        ledger: Arc::clone(&ledger),
    });

    let progress = config
        .progress
        .then(|| progress::spawn(Arc::clone(&ledger), Arc::clone(&done), start));

    let max = config.max_requests.unwrap_or(u64::MAX);
    let side_load = async {
        match &side_plan {
            Some(plan) => side::run(&client, &config.targets, plan, start, deadline).await,
            None => (Vec::new(), 0),
        }
    };
    let sampled = async {
        if options.sample_metrics.is_empty() {
            return Vec::new();
        }
        samples::sample(
            &client,
            &config.targets,
            &options.sample_metrics,
            options.sample_every,
            start,
            deadline,
        )
        .await
    };
    let shopping = async {
        match room_mode.as_mut() {
            Some(mode) => {
                let targets = &config.targets;
                mode.shop(&client, targets, item_id, start, deadline, &ledger)
                    .await
            }
            None => Ok(RoomSeen::default()),
        }
    };
    let (dropped, (side_records, side_dropped), samples, room_seen) = tokio::join!(
        schedule::drive(
            &shared,
            &config.load,
            max,
            deadline,
            options.max_in_flight,
            &done,
        ),
        side_load,
        sampled,
        shopping
    );
    let dropped = dropped?;
    let room_seen = room_seen?;
    let seconds = start.elapsed().as_secs_f64();
    if let Some(progress) = progress {
        progress.abort();
        eprintln!();
    }

    let records = std::mem::take(
        &mut *ledger
            .lock()
            .map_err(|_| anyhow::anyhow!("ledger poisoned"))?,
    );
    let mut report = summarize(item_id, &records, seconds);
    report.dropped = dropped;
    report.start_unix_ms = start_wall
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    report.side_dropped = side_dropped;
    report.side = side_answers(side_records.iter());
    report.samples = samples;
    report.sale = SaleTotals::of(&records, report.start_unix_ms, &room_seen);
    if let Some(path) = &options.phases_file {
        report.phases = phases::cut(path, start_wall, &records, &side_records)?;
    }
    if config.probe.is_some() {
        return Ok(report);
    }
    let outages = match &options.outages_file {
        Some(path) => outages::read(path, start_wall)?,
        None => Vec::new(),
    };
    report
        .checks
        .extend(limit_checks(&records, &limits, &outages));
    if let Some(plan) = &side_plan {
        let instances = config.targets.len() as u64;
        report
            .checks
            .extend(fallback_checks(&side_records, plan, &outages, instances));
    }
    if let (Some(stores), Some(before)) = (&config.stores, orders_before) {
        if let Some(limit) = options.await_reconciliation {
            let waited =
                stores::await_reconciliation(&client, &config.targets, stores, item_id, limit)
                    .await?;
            report.checks.push(Check {
                name: "reconciled".into(),
                passed: true,
                detail: waited,
            });
        }
        report
            .checks
            .extend(store_checks(stores, item_id, before, &records).await?);
    }
    if let Some(mode) = &room_mode {
        let stores = config.stores.as_ref();
        mode.judge(&room_seen, &records, &mut report, stores, orders_before)
            .await?;
    }
    Ok(report)
}

/// The instance the setup talks to: `Options::session_target`, else the first target.
fn session_target(config: &Config, options: &Options) -> String {
    let target = options.session_target.as_deref();
    let target = target.unwrap_or(&config.targets[0]);
    target.trim_end_matches('/').to_string()
}
