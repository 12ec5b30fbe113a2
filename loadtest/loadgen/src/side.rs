//! The side load: beside the purchases, a few keys of the policies that keep limiting in
//! process while Redis is away (fail mode `local`), each sent at a fixed rate whatever
//! the answers take, so that their limits can be proven from the ledger around a Redis
//! outage (`fallback_checks`): `GET /api/limited` from a few client ids, each asking
//! for one algorithm, and `GET /api/orders/mine` from a few users. All of it comes from
//! one address no purchase uses, round-robin over the targets.
//!
//! An answer 200 is an admission (with or without quota headers: a policy failing open
//! admits without them, and must not escape the count); a 5xx of `orders_read` came
//! after its admission (the limiter answers in process, the order read failed), so it
//! counts as a possible one, like a lost answer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::Semaphore;

use loadtest_core::client::{ip_of, Failure};
use loadtest_core::ledger::Record;
use loadtest_core::report::{answers, Answers};

use crate::config::SideLoad;
use crate::policies::Policy;

/// The routes of the side load, by the policy that limits each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Route {
    /// `GET /api/limited`, policy `limited`.
    Limited,
    /// `GET /api/orders/mine`, policy `orders_read`.
    OrdersRead,
}

impl Route {
    pub(crate) fn policy(self) -> &'static str {
        match self {
            Self::Limited => "limited",
            Self::OrdersRead => "orders_read",
        }
    }
}

/// One key of the side load.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    pub(crate) route: Route,
    /// The algorithm the requests ask for (`limited`) or the policy's own.
    pub(crate) algorithm: String,
    /// `X-Client-Id` of `limited`; the user's name for `orders_read`.
    pub(crate) key: String,
    /// The reader of `orders_read` and its token.
    pub(crate) user: Option<(i64, String)>,
    /// When its first request goes, after the load's start.
    pub(crate) offset: Duration,
}

/// A side request, written to the side ledger.
#[derive(Debug, Clone)]
pub(crate) struct SideRecord {
    /// Index into `SidePlan::streams`.
    pub(crate) stream: usize,
    pub(crate) route: Route,
    /// `user` is the reader (0 for `limited`); `admitted` means answered 200.
    pub(crate) record: Record,
}

impl SideRecord {
    /// Possibly admitted: answered 200, or its answer lost, or a 5xx that came after
    /// the limiter's admission (`orders_read`).
    pub(crate) fn possibly_admitted(&self) -> bool {
        self.record.possibly_admitted()
            || (self.route == Route::OrdersRead && self.record.status >= 500)
    }
}

/// The side load of a run, ready to send: its keys, its address and the policies.
#[derive(Debug)]
pub(crate) struct SidePlan {
    pub(crate) streams: Vec<Stream>,
    pub(crate) policies: Vec<Policy>,
    /// Index of the address every side request comes from (see `ip_of`).
    pub(crate) ip: u32,
    pub(crate) rate: f64,
}

/// Reads the policies and logs the readers in. The readers are users
/// `first_reader ..`, the address is index `ip`.
pub(crate) async fn prepare(
    client: &reqwest::Client,
    target: &str,
    side: &SideLoad,
    admin_token: &str,
    first_reader: i64,
    ip: u32,
) -> anyhow::Result<SidePlan> {
    anyhow::ensure!(side.rate > 0.0, "the side load's rate must be positive");
    let mut policies = Vec::new();
    for route in [Route::Limited, Route::OrdersRead] {
        policies.push(Policy::read(client, target, admin_token, route.policy()).await?);
    }
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let mut streams = Vec::new();
    for (algorithm, count) in &side.limited {
        for k in 0..*count {
            streams.push(Stream {
                route: Route::Limited,
                algorithm: algorithm.clone(),
                key: format!("loadgen-{run}-{algorithm}-{k}"),
                user: None,
                offset: side.stagger * k,
            });
        }
    }
    let readers = (0..side.orders_read_users).map(|k| first_reader + i64::from(k));
    let tokens = loadtest_core::setup::login(client, target, readers.clone()).await?;
    let algorithm = policies[1].algorithm.clone();
    for (k, user) in readers.enumerate() {
        let token = tokens.get(&user).context("a reader's token")?.clone();
        streams.push(Stream {
            route: Route::OrdersRead,
            algorithm: algorithm.clone(),
            key: format!("user {user}"),
            user: Some((user, token)),
            offset: side.stagger * k as u32,
        });
    }
    Ok(SidePlan {
        streams,
        policies,
        ip,
        rate: side.rate,
    })
}

/// Requests of one key in flight at most; a send due beyond it is dropped and counted.
const IN_FLIGHT_PER_KEY: usize = 64;

/// Sends every stream of `plan` at its rate from its offset until `deadline`; returns
/// the side ledger and the sends dropped.
pub(crate) async fn run(
    client: &reqwest::Client,
    targets: &[String],
    plan: &SidePlan,
    start: Instant,
    deadline: Instant,
) -> (Vec<SideRecord>, u64) {
    let ledger = Arc::new(Mutex::new(Vec::new()));
    let interval = Duration::from_secs_f64(1.0 / plan.rate);
    let mut streams = tokio::task::JoinSet::new();
    for (index, stream) in plan.streams.iter().enumerate() {
        let (client, targets, stream) = (client.clone(), targets.to_vec(), stream.clone());
        let (ledger, ip) = (Arc::clone(&ledger), plan.ip);
        streams.spawn(async move {
            let slots = Arc::new(Semaphore::new(IN_FLIGHT_PER_KEY));
            let mut requests = tokio::task::JoinSet::new();
            let mut next = start + stream.offset;
            let (mut n, mut dropped) = (0usize, 0u64);
            while next < deadline {
                tokio::time::sleep_until(next.into()).await;
                next += interval;
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    dropped += 1;
                    continue;
                };
                let target = n % targets.len();
                let url = format!("{}{}", targets[target], path(&stream));
                let (client, stream, ledger) =
                    (client.clone(), stream.clone(), Arc::clone(&ledger));
                requests.spawn(async move {
                    let record = fire(&client, &url, &stream, target, ip, start).await;
                    if let Ok(mut ledger) = ledger.lock() {
                        ledger.push(SideRecord {
                            stream: index,
                            route: stream.route,
                            record,
                        });
                    }
                    drop(slot);
                });
                n += 1;
            }
            while requests.join_next().await.is_some() {}
            dropped
        });
    }
    let mut dropped = 0;
    while let Some(stream) = streams.join_next().await {
        dropped += stream.unwrap_or(0);
    }
    let records = ledger
        .lock()
        .map(|mut l| std::mem::take(&mut *l))
        .unwrap_or_default();
    (records, dropped)
}

fn path(stream: &Stream) -> String {
    match stream.route {
        Route::Limited => format!("/api/limited?policy={}", stream.algorithm),
        Route::OrdersRead => "/api/orders/mine".to_string(),
    }
}

async fn fire(
    client: &reqwest::Client,
    url: &str,
    stream: &Stream,
    target: usize,
    ip: u32,
    start: Instant,
) -> Record {
    let mut request = client.get(url).header("X-Forwarded-For", ip_of(ip));
    request = match (&stream.route, &stream.user) {
        (Route::Limited, _) => request.header("X-Client-Id", &stream.key),
        (Route::OrdersRead, Some((_, token))) => request.bearer_auth(token),
        (Route::OrdersRead, None) => request,
    };
    let sent = start.elapsed();
    let mut record = Record {
        target,
        user: stream.user.as_ref().map_or(0, |(user, _)| *user),
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
    match request.send().await {
        Ok(response) => {
            record.status = response.status().as_u16();
            match response.bytes().await {
                Ok(body) => {
                    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    record.code = body["code"].as_str().map(str::to_string);
                    record.dimension = body["dimension"].as_str().map(str::to_string);
                    record.admitted = record.status == 200;
                }
                Err(e) => {
                    record.status = 0;
                    record.failure = Some(Failure::of(&e).or_lost());
                }
            }
        }
        Err(e) => record.failure = Some(Failure::of(&e)),
    }
    record.received = start.elapsed();
    record
}

/// The side records by route (`limited`, `orders_read`), then by answer.
pub(crate) fn side_answers<'a>(
    records: impl Iterator<Item = &'a SideRecord>,
) -> BTreeMap<String, BTreeMap<String, Answers>> {
    let mut routes: BTreeMap<Route, Vec<&Record>> = BTreeMap::new();
    for r in records {
        routes.entry(r.route).or_default().push(&r.record);
    }
    routes
        .into_iter()
        .map(|(route, records)| (route.policy().to_string(), answers(records.into_iter())))
        .collect()
}
