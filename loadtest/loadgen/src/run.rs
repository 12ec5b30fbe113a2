//! A run from end to end: the setup, the load, the report, then the checks of the
//! limits (from the ledger) and of the stock and orders (from the stores).

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;

use crate::config::{Config, ItemChoice, Options};
use crate::ledger::Record;
use crate::limit_checks::limit_checks;
use crate::report::{summarize, Check, Report};
use crate::request::Shared;
use crate::setup::{create_item, tokens, wait_until_listed};
use crate::stores::{order_count, store_checks};
use crate::{client, phases, progress, schedule, stores};

pub async fn run(config: Config) -> anyhow::Result<Report> {
    run_with(config, Options::default()).await
}

pub async fn run_with(config: Config, options: Options) -> anyhow::Result<Report> {
    anyhow::ensure!(!config.targets.is_empty(), "at least one target");
    anyhow::ensure!(
        config.users > 0 && config.ips > 0,
        "users and ips must be positive"
    );
    let client = client::client()?;
    let (item_ids, tokens, orders_before) = if config.probe.is_some() {
        (vec![0], HashMap::new(), None)
    } else {
        let item_ids = match &config.item {
            ItemChoice::Existing(id) => vec![*id],
            ItemChoice::Create { stock, admin_token } => {
                let mut ids = Vec::new();
                for _ in 0..options.sales.max(1) {
                    ids.push(create_item(&client, &config.targets[0], *stock, admin_token).await?);
                }
                ids
            }
        };
        for item in &item_ids {
            wait_until_listed(&client, &config.targets, *item).await?;
        }
        let item_id = item_ids[0];
        let orders_before = match &config.stores {
            Some(stores) => Some(order_count(stores, item_id).await?),
            None => None,
        };
        let session_target = options.session_target.as_deref();
        let session_target = session_target.unwrap_or(&config.targets[0]);
        let tokens = tokens(&client, &config, session_target.trim_end_matches('/')).await?;
        (item_ids, tokens, orders_before)
    };
    let item_id = item_ids[0];
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
    let dropped = schedule::drive(
        &shared,
        &config.load,
        max,
        deadline,
        options.max_in_flight,
        &done,
    )
    .await?;
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
    if let Some(path) = &options.phases_file {
        report.phases = phases::cut(path, start_wall, &records)?;
    }
    if config.probe.is_some() {
        return Ok(report);
    }
    report.checks.extend(limit_checks(&records, &config.limits));
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
            .extend(store_checks(stores, item_id, before, &report, &records).await?);
    }
    Ok(report)
}
