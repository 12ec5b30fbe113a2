//! `rls-load`: a load generator for Envoy's rate-limit gRPC API
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), for `make bench`.
//!
//! Opens `--connections` HTTP/2 connections (one tonic channel each) to `--target` and
//! sends requests with three descriptors, `user`, `ip` and `route`, one entry each, in
//! the domain `--domain`:
//! - `--mix admitted`: each value drawn from `--values` distinct ones, so (with limits
//!   out of the way) every decision is an admission on keys mostly seen before;
//! - `--mix refused`: one hot value (`--hot`) for all three, so after the first
//!   `limit` of each window every decision is a refusal.
//!
//! Closed model (default): `--concurrency` requests in flight, each sent when the last
//! answered. Open model (`--rate R`): R sends per second whatever the answers take,
//! a send falling due while `--max-in-flight` are pending dropped and counted.
//! `--warmup` seconds are sent unmeasured first; then `--started-file` is created (the
//! bench samples the servers' CPU from then) and `--duration` seconds are measured.
//!
//! The ledger (refused mix, `--limits a,b,c --window-s W`): every OK answer from the
//! start counts against each descriptor's limit in its window; whatever a window
//! admitted beyond its limit is over-admission. `--windows aligned`: windows are
//! multiples of W on the clock (the app's fixed_window); `first-hit`: a window starts
//! at the first admission after the last one ended (Limitador's counters expire W
//! after their first increment). The report (`--json`) has the decisions per second,
//! the OK / OVER_LIMIT / error counts, latency percentiles and the check.

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use rls_bench::KEYS;
use serde_json::json;
use tokio::sync::Semaphore;
use tonic::transport::{Channel, Endpoint};

struct Options {
    target: String,
    connections: usize,
    concurrency: usize,
    rate: Option<u64>,
    max_in_flight: usize,
    warmup: f64,
    duration: f64,
    refused: bool,
    domain: String,
    values: u64,
    hot: String,
    limits: Option<[u64; 3]>,
    window_ms: u64,
    aligned: bool,
    json: Option<String>,
    started_file: Option<String>,
}

fn options() -> io::Result<Options> {
    let mut given: HashMap<String, String> = HashMap::new();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let name = flag
            .strip_prefix("--")
            .ok_or_else(|| bad(&flag))?
            .to_string();
        let value = args.next().ok_or_else(|| bad(&flag))?;
        given.insert(name, value);
    }
    fn get<T: std::str::FromStr>(g: &HashMap<String, String>, k: &str, d: T) -> io::Result<T> {
        g.get(k).map_or(Ok(d), |v| v.parse().map_err(|_| bad(k)))
    }
    let limits = match given.get("limits") {
        None => None,
        Some(text) => {
            let v: Vec<u64> = text
                .split(',')
                .map(|x| x.parse())
                .collect::<Result<_, _>>()
                .map_err(|_| bad("limits"))?;
            Some(v.try_into().map_err(|_| bad("limits"))?)
        }
    };
    let options = Options {
        target: given.get("target").cloned().ok_or_else(|| bad("target"))?,
        connections: get(&given, "connections", 4usize)?.max(1),
        concurrency: get(&given, "concurrency", 64usize)?.max(1),
        rate: given
            .get("rate")
            .map(|v| v.parse())
            .transpose()
            .map_err(|_| bad("rate"))?,
        max_in_flight: get(&given, "max-in-flight", 1024usize)?.max(1),
        warmup: get(&given, "warmup", 1.0)?,
        duration: get(&given, "duration", 8.0)?,
        refused: match get(&given, "mix", "admitted".to_string())?.as_str() {
            "admitted" => false,
            "refused" => true,
            _ => return Err(bad("mix")),
        },
        domain: get(&given, "domain", "bench".to_string())?,
        values: get(&given, "values", 10_000u64)?.max(1),
        hot: get(&given, "hot", "hot".to_string())?,
        limits,
        window_ms: get(&given, "window-s", 60u64)? * 1000,
        aligned: match get(&given, "windows", "aligned".to_string())?.as_str() {
            "aligned" => true,
            "first-hit" => false,
            _ => return Err(bad("windows")),
        },
        json: given.get("json").cloned(),
        started_file: given.get("started-file").cloned(),
    };
    Ok(options)
}

fn bad(what: &str) -> io::Error {
    io::Error::other(format!("bad or missing argument: {what}"))
}

/// What the answers were; latencies (µs) and counts only while measuring, the times of
/// OK answers (ms on the clock) from the start, for the ledger.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    ok: u64,
    over_limit: u64,
    errors: u64,
    ok_times_ms: Vec<u64>,
    /// OVER_LIMIT answers from the start: what a server's counters over the whole run
    /// (the denial cache's) are divided by.
    refused_from_start: u64,
}

struct Shared {
    options: Options,
    clients: Vec<RateLimitServiceClient<Channel>>,
    measuring: AtomicBool,
    tally: Mutex<Tally>,
    sent: AtomicU64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// xorshift64*: the admitted mix's values, cheap and good enough to spread keys.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

fn request(options: &Options, random: &mut u64) -> RateLimitRequest {
    let descriptors = KEYS
        .iter()
        .map(|key| {
            let value = if options.refused {
                options.hot.clone()
            } else {
                format!("v{}", next_random(random) % options.values)
            };
            RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.to_string(),
                    value,
                }],
                ..Default::default()
            }
        })
        .collect();
    RateLimitRequest {
        domain: options.domain.clone(),
        descriptors,
        hits_addend: 0,
    }
}

/// One request on connection `n % connections`, its answer tallied.
async fn send(shared: &Shared, n: u64, random: &mut u64) {
    let mut client = shared.clients[n as usize % shared.clients.len()].clone();
    let req = request(&shared.options, random);
    let started = Instant::now();
    let answer = client.should_rate_limit(req).await;
    let took = started.elapsed().as_micros().min(u32::MAX as u128) as u32;
    let code = answer.ok().map(|a| a.into_inner().overall_code);
    let measuring = shared.measuring.load(Ordering::Relaxed);
    let mut tally = shared.tally.lock().unwrap_or_else(|e| e.into_inner());
    if code == Some(Code::Ok as i32) {
        tally.ok_times_ms.push(now_ms());
    }
    if code == Some(Code::OverLimit as i32) {
        tally.refused_from_start += 1;
    }
    if measuring {
        tally.latencies_us.push(took);
        match code {
            Some(c) if c == Code::Ok as i32 => tally.ok += 1,
            Some(c) if c == Code::OverLimit as i32 => tally.over_limit += 1,
            _ => tally.errors += 1,
        }
    }
}

/// Admissions beyond `limit` summed over the windows (see the module's doc); `times`
/// sorted.
fn over_admission(times: &[u64], limit: u64, window_ms: u64, aligned: bool) -> u64 {
    let (mut over, mut count, mut window_end) = (0u64, 0u64, None);
    for &t in times {
        if !matches!(window_end, Some(end) if t < end) {
            over += count.saturating_sub(limit);
            count = 0;
            let start = if aligned {
                t / window_ms * window_ms
            } else {
                t
            };
            window_end = Some(start + window_ms);
        }
        count += 1;
    }
    over + count.saturating_sub(limit)
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// The endpoint's connection, retried for up to 10 s: a server that answers its HTTP
/// health check may bind its gRPC listener a moment later.
async fn connect(endpoint: Endpoint) -> io::Result<Channel> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match endpoint.connect().await {
            Ok(channel) => return Ok(channel),
            Err(e) if Instant::now() >= deadline => return Err(io::Error::other(e)),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Exit 2 when the run could not be made (`make bench` stops), 0 otherwise: a failed
/// check is in the report.
fn main() {
    let run = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .and_then(|rt| rt.block_on(run()));
    if let Err(e) = run {
        eprintln!("rls-load: {e}");
        std::process::exit(2);
    }
}

async fn run() -> io::Result<()> {
    let options = options()?;
    let mut clients = Vec::new();
    for _ in 0..options.connections {
        let endpoint = Endpoint::from_shared(options.target.clone()).map_err(io::Error::other)?;
        clients.push(RateLimitServiceClient::new(
            connect(endpoint.tcp_nodelay(true)).await?,
        ));
    }
    let shared = Arc::new(Shared {
        options,
        clients,
        measuring: AtomicBool::new(false),
        tally: Mutex::new(Tally::default()),
        sent: AtomicU64::new(0),
    });
    let o = &shared.options;
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(o.warmup);
    let end = measure_from + Duration::from_secs_f64(o.duration);
    let watcher = {
        let shared = shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(measure_from.into()).await;
            shared.measuring.store(true, Ordering::Relaxed);
            if let Some(path) = &shared.options.started_file {
                let _ = std::fs::write(path, "");
            }
        })
    };
    let seed = now_ms() | 1;
    let mut dropped = 0u64;
    match o.rate {
        None => {
            let mut tasks = Vec::new();
            for t in 0..o.concurrency {
                let shared = shared.clone();
                tasks.push(tokio::spawn(async move {
                    let mut random = seed.wrapping_add(t as u64 * 0x9E37_79B9_7F4A_7C15) | 1;
                    while Instant::now() < end {
                        let n = shared.sent.fetch_add(1, Ordering::Relaxed);
                        send(&shared, n, &mut random).await;
                    }
                }));
            }
            for task in tasks {
                task.await.map_err(io::Error::other)?;
            }
        }
        Some(rate) => {
            let permits = Arc::new(Semaphore::new(o.max_in_flight));
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            let mut sent = 0u64;
            let mut random = seed;
            while Instant::now() < end {
                tick.tick().await;
                let due = (start.elapsed().as_secs_f64() * rate as f64) as u64;
                while sent < due {
                    sent += 1;
                    let Ok(permit) = permits.clone().try_acquire_owned() else {
                        dropped += u64::from(Instant::now() >= measure_from);
                        continue;
                    };
                    let shared = shared.clone();
                    let mut r = next_random(&mut random) | 1;
                    tokio::spawn(async move {
                        send(&shared, sent, &mut r).await;
                        drop(permit);
                    });
                }
            }
            // Wait for what is in flight.
            let _ = permits.acquire_many(o.max_in_flight as u32).await;
        }
    }
    let _ = watcher.await;
    let seconds = end.duration_since(measure_from).as_secs_f64();
    let mut tally = std::mem::take(&mut *shared.tally.lock().unwrap_or_else(|e| e.into_inner()));
    tally.latencies_us.sort_unstable();
    tally.ok_times_ms.sort_unstable();
    let requests = tally.ok + tally.over_limit + tally.errors;
    let mut checks = Vec::new();
    let mut over = serde_json::Map::new();
    if let (true, Some(limits)) = (o.refused, o.limits) {
        let mut total = 0;
        for (key, limit) in KEYS.iter().zip(limits) {
            let n = over_admission(&tally.ok_times_ms, limit, o.window_ms, o.aligned);
            total += n;
            over.insert(key.to_string(), json!(n));
        }
        checks.push(json!({"name": "no over-admission", "passed": total == 0}));
    }
    let lat = &tally.latencies_us;
    let report = json!({
        "requests": requests,
        "seconds": seconds,
        "requests_per_sec": requests as f64 / seconds,
        "by_status": {"OK": tally.ok, "OVER_LIMIT": tally.over_limit, "error": tally.errors},
        "dropped": dropped,
        "latency": {"p50_ms": percentile(lat, 0.50), "p99_ms": percentile(lat, 0.99),
                    "max_ms": percentile(lat, 1.0)},
        "admitted_from_start": tally.ok_times_ms.len(),
        "refused_from_start": tally.refused_from_start,
        "over_admitted": over,
        "checks": checks,
    });
    println!("{report}");
    if let Some(path) = &o.json {
        std::fs::write(path, report.to_string())?;
    }
    Ok(())
}
