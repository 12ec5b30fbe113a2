//! loadgen: drives `POST /seckill` at one or more seckill instances and then proves,
//! from its own ledger and from the stores, that the limits and the stock held.
//!
//! Every request's send and receive instants are kept. A limiter breach is reported
//! only when it is certain: `limit + 1` admissions of one key whose first send and last
//! receive lie less than one window apart were necessarily decided inside one window.
//! "Less" by a margin ([`clock_slack`]): the limiter decides on Redis's clock, truncated
//! to milliseconds, which is not the one we measure with.
//! "Admitted by the limiter" means an answer that is not a 429 and carries
//! `X-RateLimit-Remaining`; answers given before the limiter (bad input, unknown item,
//! the sold-out fast path) carry no such header and do not count.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use serde::Serialize;

mod phases;
pub mod slowloris;
mod stores;

pub use phases::Phase;
use stores::{order_count, store_checks};

/// One limit the checker expects the service to enforce.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub count: u64,
    pub window: Duration,
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub user: Limit,
    pub ip: Limit,
    pub api: Limit,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            user: Limit {
                count: 3,
                window: Duration::from_secs(60),
            },
            ip: Limit {
                count: 5,
                window: Duration::from_secs(60),
            },
            api: Limit {
                count: 1000,
                window: Duration::from_secs(1),
            },
        }
    }
}

#[derive(Debug, Clone)]
pub enum Load {
    /// Open model: this many requests per second, whatever the answers take.
    Rate(f64),
    /// Closed model: this many requests in flight at all times.
    Concurrency(usize),
}

#[derive(Debug, Clone)]
pub enum ItemChoice {
    Existing(i64),
    /// Create a fresh item with this stock through the admin API.
    Create {
        stock: i64,
        admin_token: String,
    },
}

/// Where to look after the run: Postgres and Redis of the instances under test.
#[derive(Debug, Clone)]
pub struct Stores {
    pub database_url: String,
    /// One server's URL, or a cluster's node URLs separated by commas.
    pub redis_url: String,
    pub redis_prefix: String,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Base URLs, e.g. `http://127.0.0.1:8080`; requests go round-robin.
    pub targets: Vec<String>,
    pub item: ItemChoice,
    pub users: u32,
    /// User ids are `first_user .. first_user + users`.
    pub first_user: i64,
    /// Distinct client addresses (sent as `X-Forwarded-For`); user `i` uses address
    /// `i % ips`.
    pub ips: u32,
    pub load: Load,
    pub duration: Duration,
    pub max_requests: Option<u64>,
    pub limits: Limits,
    pub stores: Option<Stores>,
    pub progress: bool,
    /// Instead of purchases, GET this path (a baseline: the constant route, the bare
    /// limiter). No item, no tokens, no checks.
    pub probe: Option<String>,
}

/// Knobs added after [`Config`], kept apart so that existing struct literals of it still
/// compile. [`run`] uses the defaults.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Fetch dev-login tokens from this base URL instead of the first target: lets a
    /// target that issues no tokens (the bench's ceiling server) be driven with tokens
    /// from an app instance sharing its JWT secret.
    pub session_target: Option<String>,
    /// Create this (empty) file when the measured phase begins, after the logins and
    /// the listing wait, so a caller can sample the servers over exactly that phase.
    pub started_file: Option<std::path::PathBuf>,
    /// POST purchases to this path instead of `/seckill` (the ceiling's `/constant`).
    pub purchase_path: Option<String>,
    /// Open model only: at most this many requests in flight. A send that falls due
    /// while the cap is reached is dropped and counted (`Report::dropped`), so an
    /// overloaded server sees bounded concurrency instead of a pile of new connections.
    pub max_in_flight: Option<usize>,
    /// Client addresses are `first_ip .. first_ip + ips` (as indices, see `ip_of`), so
    /// that consecutive runs against one instance can each use addresses no earlier run
    /// used (the ip limit's window outlasts a run).
    pub first_ip: u32,
    /// Spread the purchases over this many fresh items (each created with the
    /// configured stock; with an existing item, ignored): user `i` buys item `i % sales`,
    /// so many sales run at once. 0 and 1 mean one item. The report and the store
    /// checks are about the first item.
    pub sales: u32,
    /// Cut the report along the named windows this file lists once the load is over
    /// (see `phases`): a fault injector writes it while the load runs.
    pub phases_file: Option<std::path::PathBuf>,
    /// Before the store checks, wait (at most this long) for nothing to be pending and
    /// then for a whole reconciler round: after faults, Redis is judged as the
    /// reconciler leaves it.
    pub await_reconciliation: Option<Duration>,
}

/// What happened to one request.
#[derive(Debug, Clone)]
struct Record {
    user: i64,
    ip: u32,
    sent: Duration,
    received: Duration,
    /// 0 when no answer came back (see `failure`).
    status: u16,
    code: Option<String>,
    dimension: Option<String>,
    admitted: bool,
    /// Why no answer came back, when none did.
    failure: Option<Failure>,
    /// The order a 200 answer names.
    order_id: Option<String>,
}

impl Record {
    /// Whether the limiter may have admitted this request: it answered so, or the
    /// request reached an instance and its answer was lost (the instance died, the
    /// connection was reset, the client gave up waiting).
    fn possibly_admitted(&self) -> bool {
        self.admitted || matches!(self.failure, Some(Failure::Lost | Failure::Timeout))
    }

    /// The key of `Report::by_cause`: a 5xx with its code, or why no answer came.
    fn cause(&self) -> Option<String> {
        match (self.status, self.failure) {
            (0, Some(failure)) => Some(format!("error {}", failure.as_str())),
            (500.., _) => Some(format!(
                "{} {}",
                self.status,
                self.code.as_deref().unwrap_or("-")
            )),
            _ => None,
        }
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No connection could be made (refused, or the connect timed out): the request was
    /// never sent, so it certainly did nothing.
    Connect,
    /// Sent, but the connection broke before a whole answer came back: the outcome is
    /// unknown.
    Lost,
    /// Sent, and no answer within the client's timeout: the outcome is unknown.
    Timeout,
}

impl Failure {
    pub(crate) fn of(error: &reqwest::Error) -> Self {
        if error.is_connect() {
            Self::Connect
        } else if error.is_timeout() {
            Self::Timeout
        } else {
            Self::Lost
        }
    }

    /// A failure while reading an answer already begun cannot be a connect failure.
    pub(crate) fn or_lost(self) -> Self {
        if self == Self::Connect {
            Self::Lost
        } else {
            self
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Lost => "connection lost",
            Self::Timeout => "timeout",
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub item_id: i64,
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
    /// Requests sent whose answer was lost: counted as possibly admitted by the limit
    /// checks, and as possibly ordered by "orders match 200 answers".
    pub unknown_outcomes: u64,
    /// Open model: sends skipped because `max_in_flight` requests were outstanding.
    pub dropped: u64,
    /// The named time windows of `Options::phases_file`, each with its own figures.
    pub phases: Vec<Phase>,
    pub checks: Vec<Check>,
}

impl Report {
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
        }
        if self.dropped > 0 {
            println!("dropped:      {} sends (too many in flight)", self.dropped);
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

pub(crate) fn ip_of(index: u32) -> String {
    format!(
        "10.{}.{}.{}",
        100 + (index >> 16) % 100,
        (index >> 8) & 0xff,
        index & 0xff
    )
}

pub async fn run(config: Config) -> anyhow::Result<Report> {
    run_with(config, Options::default()).await
}

pub async fn run_with(config: Config, options: Options) -> anyhow::Result<Report> {
    anyhow::ensure!(!config.targets.is_empty(), "at least one target");
    anyhow::ensure!(
        config.users > 0 && config.ips > 0,
        "users and ips must be positive"
    );
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(4096)
        // Shorter than the server's keep-alive (actix: 5 s): a connection the server
        // closes as idle just as a request goes out loses that request's answer, which
        // would count as an unknown outcome of a healthy run.
        .pool_idle_timeout(Duration::from_secs(3))
        .tcp_nodelay(true)
        .build()?;
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
    let sequence = Arc::new(AtomicU64::new(0));
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

    let progress = config.progress.then(|| {
        let (ledger, done) = (Arc::clone(&ledger), Arc::clone(&done));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let records = ledger.lock().map(|l| summary_line(&l)).unwrap_or_default();
                eprint!(
                    "\r[{:>4.0}s] done {:>8}  {records}   ",
                    start.elapsed().as_secs_f64(),
                    done.load(Ordering::Relaxed)
                );
            }
        })
    });

    let max = config.max_requests.unwrap_or(u64::MAX);
    let mut dropped = 0;
    match config.load {
        Load::Concurrency(workers) => {
            let tasks: Vec<_> = (0..workers.max(1))
                .map(|_| {
                    let (shared, sequence, done) = (
                        Arc::clone(&shared),
                        Arc::clone(&sequence),
                        Arc::clone(&done),
                    );
                    tokio::spawn(async move {
                        loop {
                            let n = sequence.fetch_add(1, Ordering::Relaxed);
                            if n >= max || Instant::now() >= deadline {
                                break;
                            }
                            shared.fire(n).await;
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await?;
            }
        }
        Load::Rate(per_sec) => {
            anyhow::ensure!(per_sec > 0.0, "rate must be positive");
            let interval = Duration::from_secs_f64(1.0 / per_sec);
            let mut in_flight = futures_util::stream::FuturesUnordered::new();
            let mut next = Instant::now();
            let mut n = 0;
            let cap = options.max_in_flight.unwrap_or(usize::MAX);
            while n < max && Instant::now() < deadline {
                // Catch up on every send that is due, then wait for the next one while
                // collecting answers: the send schedule never waits for answers.
                while next <= Instant::now() && n < max {
                    if in_flight.len() < cap {
                        let shared = Arc::clone(&shared);
                        in_flight.push(tokio::spawn(async move { shared.fire(n).await }));
                    } else {
                        dropped += 1;
                    }
                    n += 1;
                    next += interval;
                }
                tokio::select! {
                    _ = tokio::time::sleep_until(next.into()) => {}
                    Some(_) = in_flight.next() => { done.fetch_add(1, Ordering::Relaxed); }
                }
            }
            while in_flight.next().await.is_some() {
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
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

struct Shared {
    client: reqwest::Client,
    config: Config,
    tokens: Arc<HashMap<i64, String>>,
    /// User `i` buys `item_ids[i % len]`.
    item_ids: Vec<i64>,
    purchase_path: String,
    first_ip: u32,
    start: Instant,
    ledger: Arc<Mutex<Vec<Record>>>,
}

impl Shared {
    async fn fire(&self, n: u64) {
        let index = (n % u64::from(self.config.users)) as u32;
        let user = self.config.first_user + i64::from(index);
        let ip = self.first_ip.wrapping_add(index % self.config.ips);
        let target = &self.config.targets[(n % self.config.targets.len() as u64) as usize];
        let token = self
            .tokens
            .get(&user)
            .map(String::as_str)
            .unwrap_or_default();
        let request = match &self.config.probe {
            Some(path) => self.client.get(format!("{target}{path}")),
            None => self
                .client
                .post(format!("{target}{}", self.purchase_path))
                .bearer_auth(token)
                .json(&serde_json::json!({
                    "itemId": self.item_ids[index as usize % self.item_ids.len()]
                })),
        };
        let sent = self.start.elapsed();
        let response = request.header("X-Forwarded-For", ip_of(ip)).send().await;
        let mut record = Record {
            user,
            ip,
            sent,
            received: sent,
            status: 0,
            code: None,
            dimension: None,
            admitted: false,
            failure: None,
            order_id: None,
        };
        match response {
            Ok(response) => {
                record.status = response.status().as_u16();
                record.admitted = record.status != 429
                    && response.headers().contains_key("x-ratelimit-remaining");
                match response.bytes().await {
                    Ok(body) => {
                        let body: serde_json::Value =
                            serde_json::from_slice(&body).unwrap_or_default();
                        record.code = body["code"].as_str().map(str::to_string);
                        record.dimension = body["dimension"].as_str().map(str::to_string);
                        record.order_id = body["orderId"].as_str().map(str::to_string);
                    }
                    Err(e) => {
                        // The body never arrived whole: whatever the status said, the
                        // outcome is unknown.
                        record.status = 0;
                        record.admitted = false;
                        record.failure = Some(Failure::of(&e).or_lost());
                    }
                }
            }
            Err(e) => record.failure = Some(Failure::of(&e)),
        }
        record.received = self.start.elapsed();
        if let Ok(mut ledger) = self.ledger.lock() {
            ledger.push(record);
        }
    }
}

fn summary_line(records: &[Record]) -> String {
    let mut counts: BTreeMap<u16, u64> = BTreeMap::new();
    for r in records {
        *counts.entry(r.status).or_default() += 1;
    }
    counts
        .iter()
        .map(|(s, c)| format!("{s}:{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) async fn create_item(
    client: &reqwest::Client,
    target: &str,
    stock: i64,
    admin_token: &str,
) -> anyhow::Result<i64> {
    let now = chrono::Utc::now();
    let response = client
        .post(format!("{target}/admin/api/items"))
        .bearer_auth(admin_token)
        .json(&serde_json::json!({
            "name": "loadgen item",
            "priceCents": 100,
            "stock": stock,
            "startsAt": now - chrono::Duration::minutes(1),
            "endsAt": now + chrono::Duration::hours(1),
        }))
        .send()
        .await
        .context("creating the item")?;
    anyhow::ensure!(
        response.status() == 201,
        "creating the item: {}",
        response.status()
    );
    let body: serde_json::Value = response.json().await?;
    body["id"].as_i64().context("item id in the answer")
}

/// Instances reload their item catalog every second: wait until each one lists the item.
/// A target without a catalog (`/api/items` is 404: the bench's ceiling server) is not
/// waited for.
pub(crate) async fn wait_until_listed(
    client: &reqwest::Client,
    targets: &[String],
    item: i64,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    for target in targets {
        loop {
            let listed = async {
                let response = client
                    .get(format!("{target}/api/items"))
                    .send()
                    .await
                    .ok()?;
                if response.status() == 404 {
                    return Some(true);
                }
                let body: serde_json::Value = response.json().await.ok()?;
                Some(
                    body["items"]
                        .as_array()?
                        .iter()
                        .any(|i| i["id"].as_i64() == Some(item)),
                )
            };
            if listed.await == Some(true) {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{target} does not list item {item}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

async fn tokens(
    client: &reqwest::Client,
    config: &Config,
    target: &str,
) -> anyhow::Result<HashMap<i64, String>> {
    let users = (0..config.users).map(|i| config.first_user + i64::from(i));
    login(client, target, users).await
}

/// A dev-login token for each of `users`, from `target`'s `POST /api/session`.
pub(crate) async fn login(
    client: &reqwest::Client,
    target: &str,
    users: impl Iterator<Item = i64>,
) -> anyhow::Result<HashMap<i64, String>> {
    let fetched: Vec<anyhow::Result<(i64, String)>> = futures_util::stream::iter(users)
        .map(|user| async move {
            let response = client
                .post(format!("{target}/api/session"))
                .json(&serde_json::json!({ "userId": user }))
                .send()
                .await
                .context("dev login")?;
            anyhow::ensure!(
                response.status() == 200,
                "dev login for user {user}: {}",
                response.status()
            );
            let body: serde_json::Value = response.json().await?;
            Ok((user, body["token"].as_str().context("token")?.to_string()))
        })
        .buffer_unordered(64)
        .collect()
        .await;
    fetched.into_iter().collect()
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn summarize(item_id: i64, records: &[Record], seconds: f64) -> Report {
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
    Report {
        item_id,
        requests: records.len() as u64,
        seconds,
        requests_per_sec: records.len() as f64 / seconds.max(f64::EPSILON),
        latency: latency(records.iter()),
        by_status,
        by_dimension,
        by_code,
        by_cause: by_cause(records.iter()),
        unknown_outcomes: records
            .iter()
            .filter(|r| r.status == 0 && r.possibly_admitted())
            .count() as u64,
        dropped: 0,
        phases: Vec::new(),
        checks: Vec::new(),
    }
}

fn latency<'a>(records: impl Iterator<Item = &'a Record>) -> Latency {
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

fn by_cause<'a>(records: impl Iterator<Item = &'a Record>) -> BTreeMap<String, u64> {
    let mut causes = BTreeMap::new();
    for cause in records.filter_map(Record::cause) {
        *causes.entry(cause).or_default() += 1;
    }
    causes
}

/// How much shorter than the window a span must be for its admissions to be certainly
/// inside one window: 1 ms because the limiter's clock (Redis `TIME`) is truncated to
/// milliseconds (a span of 999.8 ms can cover decisions 1000 ms apart, the first one
/// expired by then), plus 0.1 % of the window for that clock running at another rate
/// than our monotonic one (NTP slews by at most 0.05 %).
fn clock_slack(window: Duration) -> Duration {
    Duration::from_millis(1) + window / 1000
}

/// The first certain breach of `limit` among the requests `counted` (as admissions),
/// grouped by `key`, if any.
fn certain_breach<K: std::hash::Hash + Eq + std::fmt::Display>(
    records: &[Record],
    limit: Limit,
    key: impl Fn(&Record) -> K,
    counted: impl Fn(&Record) -> bool,
) -> Option<String> {
    let mut groups: HashMap<K, Vec<(Duration, Duration)>> = HashMap::new();
    for r in records.iter().filter(|r| counted(r)) {
        groups.entry(key(r)).or_default().push((r.sent, r.received));
    }
    let k = limit.count as usize + 1;
    for (key, mut admissions) in groups {
        if admissions.len() < k {
            continue;
        }
        admissions.sort();
        // Sliding maximum of receive instants over k consecutive admissions (by send).
        let mut window: VecDeque<usize> = VecDeque::new();
        for j in 0..admissions.len() {
            while window
                .back()
                .is_some_and(|&b| admissions[b].1 <= admissions[j].1)
            {
                window.pop_back();
            }
            window.push_back(j);
            if j + 1 < k {
                continue;
            }
            let i = j + 1 - k;
            while window.front().is_some_and(|&f| f < i) {
                window.pop_front();
            }
            let last_received = admissions[window[0]].1;
            let span = last_received.saturating_sub(admissions[i].0);
            if span + clock_slack(limit.window) < limit.window {
                return Some(format!(
                    "{key}: {k} admissions between {:.3} s and {:.3} s, {:.3} s apart (limit {} per {:?})",
                    admissions[i].0.as_secs_f64(),
                    last_received.as_secs_f64(),
                    span.as_secs_f64(),
                    limit.count,
                    limit.window
                ));
            }
        }
    }
    None
}

/// One check per dimension; it fails on a certain breach among the answers. A request
/// whose answer was lost (sent, then the connection broke or timed out) may have been
/// admitted: the breaches that exist only when such requests are counted as admissions
/// are reported in the detail ("possible"), but do not fail the check. On a key the
/// load keeps at its limit (the soak's addresses) every lost answer makes one, so
/// failing on them would fail every run with a killed instance while proving nothing;
/// how many there were is in the detail, for the reader to weigh. Requests that were
/// never sent (no connection) count for nothing.
fn limit_checks(records: &[Record], limits: &Limits) -> Vec<Check> {
    let unknown = records
        .iter()
        .filter(|r| r.status == 0 && r.possibly_admitted())
        .count();
    let check = |name: &str, limit: Limit, key: &dyn Fn(&Record) -> String| {
        let certain = certain_breach(records, limit, key, |r| r.admitted);
        let possible = match certain {
            Some(_) => None,
            None => certain_breach(records, limit, key, Record::possibly_admitted),
        };
        let detail = match (&certain, &possible) {
            (Some(breach), _) => breach.clone(),
            (None, Some(breach)) => format!(
                "no certain breach; possible only if one of the {unknown} lost answers was an admission: {breach}"
            ),
            (None, None) => format!(
                "no key admitted more than {} per {:?}, even counting the {unknown} lost answers as admissions",
                limit.count, limit.window
            ),
        };
        Check {
            name: name.to_string(),
            passed: certain.is_none(),
            detail,
        }
    };
    vec![
        check("user limit", limits.user, &|r| format!("user {}", r.user)),
        check("ip limit", limits.ip, &|r| format!("ip {}", ip_of(r.ip))),
        check("api limit", limits.api, &|_| "all purchases".to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(user: i64, sent_ms: u64, received_ms: u64) -> Record {
        Record {
            user,
            ip: 0,
            sent: Duration::from_millis(sent_ms),
            received: Duration::from_millis(received_ms),
            status: 200,
            code: None,
            dimension: None,
            admitted: true,
            failure: None,
            order_id: None,
        }
    }

    #[test]
    fn a_breach_is_reported_only_when_certain() {
        let limit = Limit {
            count: 3,
            window: Duration::from_secs(60),
        };
        let by_user = |r: &Record| r.user;
        // Four admissions within 1 s: certain.
        let records: Vec<_> = (0..4).map(|i| admitted(1, i * 100, i * 100 + 50)).collect();
        assert!(certain_breach(&records, limit, by_user, |r| r.admitted).is_some());
        // Four admissions whose first send and last receive are 60 s apart: not certain.
        let records = vec![
            admitted(1, 0, 10),
            admitted(1, 20, 30),
            admitted(1, 40, 50),
            admitted(1, 60_000, 60_010),
        ];
        assert!(certain_breach(&records, limit, by_user, |r| r.admitted).is_none());
        // 1001 admissions of a 1000-per-second limit 999.8 ms apart: the millisecond
        // clock may have put the first and the last 1000 ms apart, so not certain.
        let api = Limit {
            count: 1000,
            window: Duration::from_secs(1),
        };
        let records: Vec<_> = (0..1001)
            .map(|i| {
                let mut r = admitted(1, 0, 0);
                r.sent = Duration::from_micros(i * 999);
                r.received = r.sent + Duration::from_micros(800);
                r
            })
            .collect();
        assert!(certain_breach(&records, api, by_user, |r| r.admitted).is_none());
        let squeezed: Vec<_> = records
            .into_iter()
            .map(|mut r| {
                r.sent /= 2;
                r.received = r.sent + Duration::from_micros(800);
                r
            })
            .collect();
        assert!(certain_breach(&squeezed, api, by_user, |r| r.admitted).is_some());
        // Three admissions are within the limit, and other users do not add up.
        let records: Vec<_> = (0..6)
            .map(|i| admitted(i % 2, i as u64, i as u64 + 1))
            .collect();
        assert!(certain_breach(&records, limit, by_user, |r| r.admitted).is_none());
    }

    #[test]
    fn a_lost_answer_may_be_an_admission_and_a_refused_connection_is_not() {
        let limits = Limits::default();
        let user_check = |records: &[Record]| {
            limit_checks(records, &limits)
                .into_iter()
                .find(|c| c.name == "user limit")
                .expect("a user check")
        };
        let mut records: Vec<_> = (0..3).map(|i| admitted(1, i * 100, i * 100 + 50)).collect();
        let mut unanswered = admitted(1, 400, 450);
        unanswered.status = 0;
        unanswered.admitted = false;
        unanswered.failure = Some(Failure::Connect);
        records.push(unanswered.clone());
        assert!(user_check(&records).passed, "never sent: did nothing");
        assert!(user_check(&records).detail.contains("even counting"));
        for failure in [Failure::Lost, Failure::Timeout] {
            records[3].failure = Some(failure);
            let check = user_check(&records);
            assert!(check.passed, "not certain: {}", check.detail);
            assert!(
                check.detail.starts_with("no certain breach; possible"),
                "{failure:?} may have been admitted: {}",
                check.detail
            );
        }
        // A fourth answered admission is certain.
        records[3] = admitted(1, 400, 450);
        assert!(!user_check(&records).passed);
        // Causes: a 5xx by its code, no answer by why.
        unanswered.failure = Some(Failure::Timeout);
        records.push(unanswered);
        let mut unavailable = admitted(2, 0, 1);
        unavailable.status = 503;
        unavailable.code = Some("LIMITER_UNAVAILABLE".into());
        records.push(unavailable);
        let causes = by_cause(records.iter());
        assert_eq!(causes.get("503 LIMITER_UNAVAILABLE"), Some(&1));
        assert_eq!(causes.get("error timeout"), Some(&1));
        assert_eq!(causes.len(), 2, "{causes:?}");
        let report = summarize(0, &records, 1.0);
        assert_eq!(
            report.unknown_outcomes, 1,
            "the timeout, not the refused connection"
        );
    }
}
