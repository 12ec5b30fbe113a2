//! `loadgen`: drive a seckill sale and check that the limits and the stock held.
//! Exits 1 when a check fails, 2 when the run itself could not be made.

use std::time::Duration;

use clap::Parser;
use loadgen::{Config, ItemChoice, LimitParts, Limits, Load, Options, RoomPlan, SideLoad, Stores};

#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Base URL of an instance; repeat for several (round-robin). Loopback only.
    #[arg(long = "target", default_value = "http://127.0.0.1:8080")]
    targets: Vec<String>,
    /// Buy this existing item...
    #[arg(long)]
    item: Option<i64>,
    /// ...or create one with this stock through the admin API.
    #[arg(long, default_value_t = 100)]
    stock: i64,
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", default_value = "dev-admin-token")]
    admin_token: String,
    /// Distinct users (dev-login tokens are fetched for each).
    #[arg(long, default_value_t = 1000)]
    users: u32,
    /// Spread the purchases over this many fresh items, each created with --stock:
    /// user i buys item i % N, so N sales run at once (the report is about the first).
    #[arg(long, default_value_t = 1)]
    sales: u32,
    /// First user id.
    #[arg(long, default_value_t = 1)]
    first_user: i64,
    /// Distinct client IPs, sent as X-Forwarded-For.
    #[arg(long, default_value_t = 1000)]
    ips: u32,
    /// Index of the first client IP (so a later run can use addresses an earlier one
    /// did not).
    #[arg(long, default_value_t = 0)]
    first_ip: u32,
    /// Open model: requests per second...
    #[arg(long, conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// ...or closed model: requests in flight.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Stop after this many requests.
    #[arg(long)]
    requests: Option<u64>,
    /// The limits the checker expects: count per window (seconds). Each one not given
    /// is the `seckill` policy's own, read from the admin API of --session-target, else
    /// of the first target.
    #[arg(long)]
    user_limit: Option<u64>,
    #[arg(long)]
    user_window: Option<f64>,
    #[arg(long)]
    ip_limit: Option<u64>,
    #[arg(long)]
    ip_window: Option<f64>,
    #[arg(long)]
    api_limit: Option<u64>,
    #[arg(long)]
    api_window: Option<f64>,
    /// Check Postgres and Redis after the run (needs all three).
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// One server's URL, or a Redis Cluster's node URLs separated by commas.
    #[arg(long, env = "REDIS_URL")]
    redis_url: Option<String>,
    #[arg(long, env = "SECKILL_REDIS_KEY_PREFIX", default_value = "seckill")]
    redis_prefix: String,
    /// Skip the store checks even when the URLs are set.
    #[arg(long)]
    no_store_checks: bool,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// No live progress line.
    #[arg(long)]
    quiet: bool,
    /// Baseline mode: GET this path instead of purchasing (no item, no checks).
    #[arg(long)]
    probe: Option<String>,
    /// Fetch dev-login tokens from this instance instead of the first target (for a
    /// target that issues none, e.g. the bench's ceiling server).
    #[arg(long)]
    session_target: Option<String>,
    /// Create this file when the measured phase begins (after logins).
    #[arg(long)]
    started_file: Option<std::path::PathBuf>,
    /// POST purchases to this path instead of /seckill.
    #[arg(long)]
    purchase_path: Option<String>,
    /// Open model: at most this many requests in flight; sends due beyond it are
    /// dropped and counted.
    #[arg(long, requires = "rate")]
    max_in_flight: Option<usize>,
    /// Report each window this file lists (`NAME START_MS END_MS` per line, Unix
    /// milliseconds; written while the load runs) with its own latency and causes.
    #[arg(long)]
    phases: Option<std::path::PathBuf>,
    /// Before the store checks, wait up to this many seconds for no reservation to be
    /// pending and then for a whole reconciler round (`seckill_reconciler_rounds_total`
    /// of the targets).
    #[arg(long)]
    await_reconciliation: Option<f64>,
    /// Side load: this many client ids of `GET /api/limited` asking for an algorithm,
    /// as ALGORITHM=COUNT (repeat for several algorithms).
    #[arg(long = "limited", value_parser = algorithm_count)]
    limited: Vec<(String, u32)>,
    /// Side load: this many users reading `GET /api/orders/mine`.
    #[arg(long, default_value_t = 0)]
    orders_read_users: u32,
    /// Side load: requests per second of each of its keys.
    #[arg(long, default_value_t = 12.0)]
    side_rate: f64,
    /// Side load: the k-th key of an algorithm (and the k-th reader) starts k times
    /// this many seconds after the load.
    #[arg(long, default_value_t = 0.0)]
    side_stagger: f64,
    /// Judge the limits around the Redis outages this file lists (`kept|lost FROM_MS
    /// DOWN_MS UP_MS TO_MS` per line, Unix milliseconds; written while the load runs).
    #[arg(long)]
    redis_outages: Option<std::path::PathBuf>,
    /// Sample the series starting with this (a family, or a family and its first
    /// labels) from every target while the load runs (repeat for several); the samples
    /// go into the JSON report.
    #[arg(long = "sample-metric")]
    sample_metrics: Vec<String>,
    #[arg(long, default_value_t = 200)]
    sample_every_ms: u64,
    /// Room mode: turn the item's waiting room on and send this many shoppers through it
    /// (join, poll, buy with the pass), users and addresses of their own after the
    /// load's, while the load keeps purchasing without a pass.
    #[arg(long, value_name = "SHOPPERS")]
    room: Option<u32>,
    /// Room mode: the room's admitPerSecond...
    #[arg(long, default_value_t = 50, requires = "room")]
    room_admit_per_second: u32,
    /// ...and maxActive.
    #[arg(long, default_value_t = 100, requires = "room")]
    room_max_active: u32,
    /// Room mode: between a shopper's polls (the poll budget refills one a second by
    /// default, with a burst of 20).
    #[arg(long, default_value_t = 1000, requires = "room")]
    room_poll_every_ms: u64,
}

/// `ALGORITHM=COUNT`.
fn algorithm_count(value: &str) -> Result<(String, u32), String> {
    let (algorithm, count) = value
        .split_once('=')
        .ok_or_else(|| format!("{value:?}: expected ALGORITHM=COUNT"))?;
    let count = count.parse().map_err(|e| format!("{value:?}: {e}"))?;
    Ok((algorithm.to_string(), count))
}

fn limit(count: Option<u64>, seconds: Option<f64>) -> LimitParts {
    LimitParts {
        count,
        window: seconds.map(Duration::from_secs_f64),
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let stores = match (&args.database_url, &args.redis_url, args.no_store_checks) {
        (Some(database_url), Some(redis_url), false) => Some(Stores {
            database_url: database_url.clone(),
            redis_url: redis_url.clone(),
            redis_prefix: args.redis_prefix.clone(),
        }),
        _ => None,
    };
    let config = Config {
        targets: args
            .targets
            .iter()
            .map(|t| t.trim_end_matches('/').to_string())
            .collect(),
        item: match args.item {
            Some(id) => ItemChoice::Existing(id),
            None => ItemChoice::Create { stock: args.stock },
        },
        users: args.users,
        first_user: args.first_user,
        ips: args.ips,
        load: match args.rate {
            Some(rate) => Load::Rate(rate),
            None => Load::Concurrency(args.concurrency),
        },
        duration: Duration::from_secs_f64(args.duration),
        max_requests: args.requests,
        limits: Limits {
            user: limit(args.user_limit, args.user_window),
            ip: limit(args.ip_limit, args.ip_window),
            api: limit(args.api_limit, args.api_window),
        },
        admin_token: args.admin_token.clone(),
        stores,
        progress: !args.quiet,
        probe: args.probe.clone(),
    };
    let options = Options {
        session_target: args.session_target.clone(),
        started_file: args.started_file.clone(),
        purchase_path: args.purchase_path.clone(),
        max_in_flight: args.max_in_flight,
        first_ip: args.first_ip,
        sales: args.sales,
        phases_file: args.phases.clone(),
        await_reconciliation: args.await_reconciliation.map(Duration::from_secs_f64),
        side: (!args.limited.is_empty() || args.orders_read_users > 0).then(|| SideLoad {
            limited: args.limited.clone(),
            orders_read_users: args.orders_read_users,
            rate: args.side_rate,
            stagger: Duration::from_secs_f64(args.side_stagger),
        }),
        outages_file: args.redis_outages.clone(),
        sample_metrics: args.sample_metrics.clone(),
        sample_every: Duration::from_millis(args.sample_every_ms),
        room: args.room.map(|shoppers| RoomPlan {
            shoppers,
            admit_per_second: args.room_admit_per_second,
            max_active: args.room_max_active,
            poll_every: Duration::from_millis(args.room_poll_every_ms),
        }),
    };
    let report = match loadgen::run_with(config, options).await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            std::process::exit(2);
        }
    };
    report.print();
    if let Some(path) = &args.json {
        let written = serde_json::to_string_pretty(&report)
            .map_err(anyhow::Error::from)
            .and_then(|json| Ok(std::fs::write(path, json)?));
        if let Err(e) = written {
            eprintln!("loadgen: writing {}: {e:#}", path.display());
            std::process::exit(2);
        }
    }
    if !report.passed() {
        eprintln!(
            "loadgen: checks failed: {}",
            report.failed_checks().join(", ")
        );
        std::process::exit(1);
    }
}
