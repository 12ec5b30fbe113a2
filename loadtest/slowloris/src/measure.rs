//! Everyone else, measured while the attack runs, in an open model: requests are sent on
//! a fixed schedule whatever the answers take, each on a connection of its own (a new
//! client, or a proxy opening a new upstream connection, must win a place like the
//! attacker's sockets do). An answer not in time is a timeout, not a slow sample.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde::Serialize;
use tokio::time::Instant;

use loadtest_core::client::{ip_of, Failure};
use loadtest_core::report::percentile;

/// What everyone else sends, where, and when.
pub(crate) struct Traffic {
    /// `GET /health/live` of the service and of the probe listener.
    pub main_live: String,
    pub probe_live: Option<String>,
    /// `POST /seckill` of the service, buying `item` with `tokens[first_user + n]` from
    /// address `first_ip + n`.
    pub purchase: String,
    pub item: i64,
    pub tokens: HashMap<i64, String>,
    pub first_user: i64,
    pub first_ip: u32,
    pub liveness_rate: f64,
    pub purchase_rate: f64,
    pub client_source: IpAddr,
    pub timeout: Duration,
    /// Requests are sent from `from` until `to`.
    pub from: Instant,
    pub to: Instant,
}

pub(crate) struct Measured {
    pub main_live: Vec<Sample>,
    pub probe_live: Vec<Sample>,
    pub purchases: Vec<Sample>,
}

/// Sends and collects everyone else's requests, on a runtime (and a thread) of its own:
/// the attacker's thousands of tasks keep the other runtime's threads busy, and a
/// measured request queued behind them would time the tool, not the server. Counts
/// progress in `counts` (main, probe, purchases).
pub(crate) fn everyone_else(
    traffic: Traffic,
    counts: [Arc<Counts>; 3],
) -> anyhow::Result<Measured> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // A new connection per request.
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(traffic.timeout)
            .local_address(traffic.client_source)
            .tcp_nodelay(true)
            .build()?;
        let get = |url: String| {
            let client = client.clone();
            move |_| {
                let request = client.get(url.clone());
                async move { reply_of(request.send().await).await }
            }
        };
        let (from, to) = (traffic.from, traffic.to);
        let [main, probe, buys] = counts;
        let main_live = open_model(
            traffic.liveness_rate,
            from,
            to,
            main,
            get(traffic.main_live.clone()),
        );
        let probe_rate = if traffic.probe_live.is_some() {
            traffic.liveness_rate
        } else {
            0.0
        };
        let probe_url = traffic.probe_live.clone().unwrap_or_default();
        let probe_live = open_model(probe_rate, from, to, probe, get(probe_url));
        let purchases = open_model(traffic.purchase_rate, from, to, buys, |n| {
            let user = traffic.first_user + n as i64;
            let token = traffic.tokens.get(&user).cloned().unwrap_or_default();
            let request = client
                .post(traffic.purchase.clone())
                .bearer_auth(token)
                .header(
                    "X-Forwarded-For",
                    ip_of(traffic.first_ip.wrapping_add(n as u32)),
                )
                .json(&serde_json::json!({ "itemId": traffic.item }));
            async move { reply_of(request.send().await).await }
        });
        let (main_live, probe_live, purchases) = tokio::join!(main_live, probe_live, purchases);
        Ok(Measured {
            main_live,
            probe_live,
            purchases,
        })
    })
}

/// One request: how long it took, and what came of it.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) took: Duration,
    pub(crate) reply: Reply,
}

#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// An HTTP answer, with the error envelope's code when it had one.
    Answer {
        status: u16,
        code: Option<String>,
    },
    Failed(Failure),
}

impl Reply {
    fn label(&self) -> String {
        match self {
            Self::Answer { status, code: None } => status.to_string(),
            Self::Answer {
                status,
                code: Some(code),
            } => format!("{status} {code}"),
            Self::Failed(failure) => format!("error {}", failure.as_str()),
        }
    }
}

/// Requests sent and answered so far, for the progress line.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) sent: AtomicU64,
    pub(crate) answered: AtomicU64,
}

/// Sends `request(n)` at `rate` per second from `from` until `to`, and collects every
/// sample (the last ones arrive up to the client's timeout after `to`).
pub(crate) async fn open_model<F, Fut>(
    rate: f64,
    from: Instant,
    to: Instant,
    counts: Arc<Counts>,
    request: F,
) -> Vec<Sample>
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let mut samples = Vec::new();
    if rate <= 0.0 {
        return samples;
    }
    let interval = Duration::from_secs_f64(1.0 / rate);
    let mut in_flight = futures_util::stream::FuturesUnordered::new();
    let mut next = from;
    let mut n = 0;
    tokio::time::sleep_until(from).await;
    while next < to {
        while next <= Instant::now() && next < to {
            let sent = Instant::now();
            let answer = request(n);
            let counts = Arc::clone(&counts);
            counts.sent.fetch_add(1, Ordering::Relaxed);
            in_flight.push(tokio::spawn(async move {
                let reply = answer.await;
                if matches!(reply, Reply::Answer { .. }) {
                    counts.answered.fetch_add(1, Ordering::Relaxed);
                }
                Sample {
                    took: sent.elapsed(),
                    reply,
                }
            }));
            n += 1;
            next += interval;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            Some(done) = in_flight.next() => samples.extend(done.ok()),
        }
    }
    while let Some(done) = in_flight.next().await {
        samples.extend(done.ok());
    }
    samples
}

/// What a request got, from reqwest's answer (the body read whole: a lost body is a
/// lost answer).
pub(crate) async fn reply_of(response: reqwest::Result<reqwest::Response>) -> Reply {
    let response = match response {
        Ok(response) => response,
        Err(e) => return Reply::Failed(Failure::of(&e)),
    };
    let status = response.status().as_u16();
    match response.bytes().await {
        Ok(body) => {
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            Reply::Answer {
                status,
                code: body["code"].as_str().map(str::to_string),
            }
        }
        Err(e) => Reply::Failed(Failure::of(&e).or_lost()),
    }
}

/// One kind of request's figures. Percentiles are over every request sent, an
/// unanswered one counting as slower than any answer: `None` when the percentile falls
/// on one.
#[derive(Debug, Serialize)]
pub struct Figures {
    pub sent: u64,
    pub answered: u64,
    /// By status (and error code), or `error connect|connection lost|timeout`.
    pub outcomes: BTreeMap<String, u64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub slowest_answer_ms: Option<f64>,
}

impl Figures {
    pub(crate) fn of(samples: &[Sample]) -> Self {
        let mut outcomes = BTreeMap::new();
        for s in samples {
            *outcomes.entry(s.reply.label()).or_default() += 1;
        }
        let mut times: Vec<f64> = samples
            .iter()
            .map(|s| match s.reply {
                Reply::Answer { .. } => s.took.as_secs_f64() * 1000.0,
                Reply::Failed(_) => f64::INFINITY,
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let finite = |ms: f64| ms.is_finite().then_some(ms);
        let answered = times.iter().filter(|t| t.is_finite()).count();
        Self {
            sent: samples.len() as u64,
            answered: answered as u64,
            outcomes,
            p50_ms: if times.is_empty() {
                None
            } else {
                finite(percentile(&times, 50.0))
            },
            p99_ms: if times.is_empty() {
                None
            } else {
                finite(percentile(&times, 99.0))
            },
            max_ms: times.last().copied().and_then(finite),
            slowest_answer_ms: answered.checked_sub(1).map(|i| times[i]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64, reply: Reply) -> Sample {
        Sample {
            took: Duration::from_millis(ms),
            reply,
        }
    }

    #[test]
    fn an_unanswered_request_is_slower_than_any_answer() {
        let ok = || Reply::Answer {
            status: 200,
            code: None,
        };
        let mut samples: Vec<_> = (1..=98).map(|ms| sample(ms, ok())).collect();
        samples.push(sample(5, Reply::Failed(Failure::Connect)));
        samples.push(sample(10_000, Reply::Failed(Failure::Timeout)));
        let figures = Figures::of(&samples);
        assert_eq!((figures.sent, figures.answered), (100, 98));
        assert_eq!(figures.p50_ms, Some(50.0));
        assert_eq!(figures.p99_ms, None, "the 99th is unanswered");
        assert_eq!(figures.max_ms, None);
        assert_eq!(figures.slowest_answer_ms, Some(98.0));
        assert_eq!(figures.outcomes.get("error timeout"), Some(&1));
        assert_eq!(figures.outcomes.get("200"), Some(&98));
        let none = Figures::of(&[]);
        assert_eq!(
            (none.p50_ms, none.max_ms, none.slowest_answer_ms),
            (None, None, None)
        );
    }
}
