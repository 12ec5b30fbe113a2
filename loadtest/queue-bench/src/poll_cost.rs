//! What a poll costs: `GET /api/items/{id}/queue` by shoppers waiting in a room (it
//! admits one a second, so nearly all wait), against the sold-out path (`POST /seckill`
//! at a sold-out item, answered from memory) by the same shoppers, both closed-loop at
//! saturation with the same connections and concurrency, alternated in pairs (poll,
//! sold out, poll, sold out, ...). Per pair: polls/s ÷ sold-out answers/s, and the
//! room's Redis calls (`seckill_redis_calls_total{purpose="queue"}`: lobby refreshes,
//! liveness writes, the inlet) over the poll phase ÷ its polls. The polls go round the
//! tickets in turn, and there must be enough of them for each to stay within its poll
//! bucket (`sale::room::poll_budget`): a 429 fails the "every poll answered 200" check.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::Serialize;

use crate::crowd::{log_in, Account};
use crate::figures::{check, median, percentile, Lines, ScenarioReport};
use crate::site::{queue_calls, RoomSettings, Site};

#[derive(Debug, Clone)]
pub struct PollCost {
    pub shoppers: u32,
    pub first_user: i64,
    pub first_ip: u32,
    pub concurrency: usize,
    pub seconds: f64,
    pub pairs: u32,
    /// The server's process, for its CPU per request (`/proc/<pid>/stat`).
    pub server_pid: Option<u32>,
    pub clk_tck: u64,
}

/// One closed-loop phase.
#[derive(Debug, Serialize)]
pub struct Phase {
    pub requests: u64,
    pub seconds: f64,
    pub per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// µs of the server's CPU per request, when its pid was given.
    pub cpu_us: Option<f64>,
    pub by_answer: BTreeMap<String, u64>,
}

#[derive(Debug, Serialize)]
pub struct Pair {
    pub polls: Phase,
    pub sold_out: Phase,
    /// polls/s ÷ sold-out answers/s.
    pub ratio: f64,
    /// The server's CPU per poll ÷ per sold-out answer (when its pid was given): what a
    /// poll costs, steadier than throughput when other work shares the cores.
    pub cpu_ratio: Option<f64>,
    pub queue_calls: f64,
    pub calls_per_poll: f64,
}

#[derive(Debug, Serialize)]
pub struct PollCostFigures {
    pub shoppers: u32,
    pub concurrency: usize,
    pub pairs: Vec<Pair>,
    pub ratio_median: f64,
    pub ratio_range: (f64, f64),
    pub cpu_ratio_median: Option<f64>,
    pub calls_per_poll_median: f64,
    pub calls_per_poll_max: f64,
}

impl Lines for PollCostFigures {
    fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .pairs
            .iter()
            .enumerate()
            .map(|(k, p)| {
                format!(
                    "pair {}: polls {:.0}/s (p99 {:.2} ms, {} µs CPU), sold out {:.0}/s (p99 {:.2} ms, {} µs CPU): ratio {:.2}; {:.0} room Redis calls for {} polls = {:.5} per poll",
                    k + 1,
                    p.polls.per_sec,
                    p.polls.p99_ms,
                    p.polls.cpu_us.map_or("-".into(), |c| format!("{c:.1}")),
                    p.sold_out.per_sec,
                    p.sold_out.p99_ms,
                    p.sold_out.cpu_us.map_or("-".into(), |c| format!("{c:.1}")),
                    p.ratio,
                    p.queue_calls,
                    p.polls.requests,
                    p.calls_per_poll
                )
            })
            .collect();
        lines.push(format!(
            "polls ÷ sold-out path: median {:.2} ({:.2}-{:.2}); server CPU per poll ÷ per sold-out answer: median {}; Redis calls per poll: median {:.5}, max {:.5}",
            self.ratio_median,
            self.ratio_range.0,
            self.ratio_range.1,
            self.cpu_ratio_median
                .map_or("-".into(), |c| format!("{c:.2}")),
            self.calls_per_poll_median,
            self.calls_per_poll_max
        ));
        lines
    }
}

pub async fn run(site: Site, config: PollCost) -> anyhow::Result<ScenarioReport<PollCostFigures>> {
    let accounts = log_in(
        &site,
        config.first_user,
        config.first_ip,
        config.shoppers,
        0,
        1,
    )
    .await?;
    let started = Utc::now() - chrono::Duration::minutes(1);
    // The room: everyone joins, one admitted a second.
    let room_item = site.create_item(1_000_000, started).await?;
    let settings = RoomSettings {
        random: false,
        prequeue_from: None,
        admit_per_second: 1,
        max_active: 1_000_000,
        pass_ttl_secs: 3600,
        abandon_after_secs: 3600,
    };
    site.set_room(room_item, &settings).await?;
    // The sold-out item: one unit, bought.
    let sold_item = site.create_item(1, started).await?;
    site.until_listed(room_item, true).await?;
    site.until_listed(sold_item, false).await?;
    let tickets = join_all(&site, room_item, &accounts).await?;
    buy_out(&site, sold_item, &accounts[0]).await?;

    let site = Arc::new(site);
    let accounts = Arc::new(accounts);
    let tickets = Arc::new(tickets);
    let mut pairs = Vec::new();
    for _ in 0..config.pairs.max(1) {
        let before = site.metrics(0).await.unwrap_or_default();
        let polls = {
            let (site, accounts, tickets) = (site.clone(), accounts.clone(), tickets.clone());
            closed_loop(&config, move |n| {
                let who = &accounts[(n % accounts.len() as u64) as usize];
                site.client
                    .get(format!("{}/api/items/{room_item}/queue", site.targets[0]))
                    .bearer_auth(&who.token)
                    .header("X-Forwarded-For", &who.ip)
                    .header(
                        "Queue-Ticket",
                        &tickets[(n % tickets.len() as u64) as usize],
                    )
            })
            .await?
        };
        let after = site.metrics(0).await.unwrap_or_default();
        let sold_out = {
            let (site, accounts) = (site.clone(), accounts.clone());
            closed_loop(&config, move |n| {
                let who = &accounts[(n % accounts.len() as u64) as usize];
                site.client
                    .post(format!("{}/seckill", site.targets[0]))
                    .bearer_auth(&who.token)
                    .header("X-Forwarded-For", &who.ip)
                    .json(&serde_json::json!({ "itemId": sold_item }))
            })
            .await?
        };
        let calls = queue_calls(&after) - queue_calls(&before);
        pairs.push(Pair {
            ratio: polls.per_sec / sold_out.per_sec.max(f64::EPSILON),
            cpu_ratio: polls.cpu_us.zip(sold_out.cpu_us).map(|(p, s)| p / s),
            queue_calls: calls,
            calls_per_poll: calls / polls.requests.max(1) as f64,
            polls,
            sold_out,
        });
    }
    let ratios: Vec<f64> = pairs.iter().map(|p| p.ratio).collect();
    let calls: Vec<f64> = pairs.iter().map(|p| p.calls_per_poll).collect();
    let figures = PollCostFigures {
        shoppers: config.shoppers,
        concurrency: config.concurrency,
        ratio_median: median(&ratios),
        ratio_range: (percentile(&ratios, 0.0), percentile(&ratios, 100.0)),
        cpu_ratio_median: {
            let cpu: Vec<f64> = pairs.iter().filter_map(|p| p.cpu_ratio).collect();
            (!cpu.is_empty()).then(|| median(&cpu))
        },
        calls_per_poll_median: median(&calls),
        calls_per_poll_max: percentile(&calls, 100.0),
        pairs,
    };
    // Polls answer 200, `waiting` (or `admitted`, for the one place a second the room
    // lets in); purchases answer sold out.
    let only = |phase: &Phase, answers: &[&str]| {
        answers
            .iter()
            .map(|a| phase.by_answer.get(*a).copied().unwrap_or(0))
            .sum::<u64>()
            == phase.requests
    };
    let clean = figures.pairs.iter().all(|p| {
        only(&p.polls, &["200 waiting", "200 admitted"]) && only(&p.sold_out, &["409 SOLD_OUT"])
    });
    let checks = vec![
        check(
            "polls ÷ sold-out path ≥ 0.90",
            figures.ratio_median >= 0.90,
            format!(
                "median of {} pairs {:.2} ({:.2}-{:.2})",
                figures.pairs.len(),
                figures.ratio_median,
                figures.ratio_range.0,
                figures.ratio_range.1
            ),
        ),
        check(
            "room Redis calls per poll ≤ 0.01",
            figures.calls_per_poll_max <= 0.01,
            format!(
                "median {:.5}, max {:.5} (liveness writes, lobby refreshes and the inlet included)",
                figures.calls_per_poll_median, figures.calls_per_poll_max
            ),
        ),
        check(
            "every poll answered 200, every purchase sold out",
            clean,
            figures
                .pairs
                .iter()
                .map(|p| format!("{:?} / {:?}", p.polls.by_answer, p.sold_out.by_answer))
                .collect::<Vec<_>>()
                .join("; "),
        ),
    ];
    Ok(ScenarioReport {
        scenario: "poll cost",
        figures,
        checks,
    })
}

/// Every account joins the room (64 at a time); their tickets, in the accounts' order.
async fn join_all(site: &Site, item: i64, accounts: &[Account]) -> anyhow::Result<Vec<String>> {
    use futures_util::StreamExt;
    let tickets: Vec<anyhow::Result<String>> = futures_util::stream::iter(accounts)
        .map(|who| async move {
            let response = site
                .client
                .post(format!("{}/api/items/{item}/queue", site.targets[0]))
                .bearer_auth(&who.token)
                .header("X-Forwarded-For", &who.ip)
                .send()
                .await?;
            anyhow::ensure!(response.status() == 200, "join: {}", response.status());
            let body: serde_json::Value = response.json().await?;
            body["ticket"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow::anyhow!("no ticket"))
        })
        .buffered(64)
        .collect()
        .await;
    tickets.into_iter().collect()
}

/// Buys the item's only unit, then waits until the instance answers sold out from memory.
async fn buy_out(site: &Site, item: i64, who: &Account) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = site
            .client
            .post(format!("{}/seckill", site.targets[0]))
            .bearer_auth(&who.token)
            .header("X-Forwarded-For", &who.ip)
            .json(&serde_json::json!({ "itemId": item }))
            .send()
            .await?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.unwrap_or_default();
        if status == 409 && body["code"] == "SOLD_OUT" {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "item {item} not sold out: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `concurrency` requests in flight for `seconds`, request `n` built by `make(n)`.
async fn closed_loop(
    config: &PollCost,
    make: impl Fn(u64) -> reqwest::RequestBuilder + Send + Sync + 'static,
) -> anyhow::Result<Phase> {
    let make = Arc::new(make);
    let sequence = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(config.seconds);
    let cpu_before = config.server_pid.and_then(cpu_ticks);
    let workers: Vec<_> = (0..config.concurrency.max(1))
        .map(|_| {
            let (make, sequence) = (Arc::clone(&make), Arc::clone(&sequence));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut answers: BTreeMap<String, u64> = BTreeMap::new();
                while Instant::now() < deadline {
                    let n = sequence.fetch_add(1, Ordering::Relaxed);
                    let sent = Instant::now();
                    let answer = match make(n).send().await {
                        Ok(response) => {
                            let status = response.status().as_u16();
                            match response.bytes().await {
                                Ok(body) => {
                                    let body: serde_json::Value =
                                        serde_json::from_slice(&body).unwrap_or_default();
                                    let what = body["code"].as_str().or(body["state"].as_str());
                                    format!("{status} {}", what.unwrap_or("-"))
                                }
                                Err(_) => "error".into(),
                            }
                        }
                        Err(_) => "error".into(),
                    };
                    latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
                    *answers.entry(answer).or_default() += 1;
                }
                (latencies, answers)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut by_answer: BTreeMap<String, u64> = BTreeMap::new();
    for worker in workers {
        let (l, a) = worker.await?;
        latencies.extend(l);
        for (k, v) in a {
            *by_answer.entry(k).or_default() += v;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu_after = config.server_pid.and_then(cpu_ticks);
    let requests = latencies.len() as u64;
    let cpu_us = match (cpu_before, cpu_after) {
        (Some(b), Some(a)) if requests > 0 => {
            Some((a - b) as f64 / config.clk_tck as f64 / requests as f64 * 1e6)
        }
        _ => None,
    };
    Ok(Phase {
        requests,
        seconds,
        per_sec: requests as f64 / seconds,
        p50_ms: percentile(&latencies, 50.0),
        p99_ms: percentile(&latencies, 99.0),
        cpu_us,
        by_answer,
    })
}

/// A process's CPU time so far (user + system), in clock ticks: fields 14 and 15 of
/// `/proc/<pid>/stat`, counted after the parenthesised command name.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(") ")?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}
