//! A slowloris against one instance, on loopback, with everyone else measured meanwhile
//! (`slowloris` binary; `scripts/slowloris.sh` runs it, docs/soak.md has the figures).
//!
//! The attack: `sockets` connections from one loopback source address (not 127.0.0.1,
//! which the app trusts as a proxy and exempts from the per-address cap), each sending a
//! request head that never ends, a byte per tick, reopened as soon as the server closes
//! it ([`attack`]). Everyone else, in an open model from the end of the warm-up to the
//! end of the attack ([`measure`]): `GET /health/live` on the service's port and on the
//! probe listener's, and purchases by distinct users behind distinct `X-Forwarded-For`
//! addresses through 127.0.0.1, each request on a new connection. The attack goes on
//! until the last of them is answered or timed out, then everything stops.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::time::Instant;

pub mod attack;
pub mod measure;

use attack::{Attack, AttackReport, Live};
use measure::{open_model, outcome_of, Counts, Figures};

#[derive(Debug, Clone)]
pub struct Config {
    /// The service, e.g. `http://127.0.0.1:8080`: attacked and measured.
    pub target: String,
    /// The probe listener, measured only; it may not answer at all (a build without one).
    pub probe_target: Option<String>,
    pub attack: Attack,
    /// Where everyone else connects from: 127.0.0.1 is the trusted proxy, so the
    /// purchases' `X-Forwarded-For` addresses are believed.
    pub client_source: IpAddr,
    /// The attack's length; the measured requests are sent from `warmup` until then.
    pub duration: Duration,
    pub warmup: Duration,
    /// Liveness requests per second, on each port.
    pub liveness_rate: f64,
    pub purchase_rate: f64,
    /// Longest a measured request may take; then it counts as a timeout.
    pub request_timeout: Duration,
    pub admin_token: String,
    pub first_user: i64,
    pub first_ip: u32,
    /// Created (empty) when the attack begins, after the item and the logins.
    pub started_file: Option<PathBuf>,
    /// A progress line on stderr every 5 s.
    pub progress: bool,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub target: String,
    pub probe_target: Option<String>,
    pub item_id: i64,
    /// From the first attacker connect to the last socket's close.
    pub attack_seconds: f64,
    /// The window the measured requests were sent in, from the start of the attack.
    pub measured_from_s: f64,
    pub measured_to_s: f64,
    pub liveness_rate: f64,
    pub purchase_rate: f64,
    pub request_timeout_ms: u64,
    pub liveness_main: Figures,
    pub liveness_probe: Option<Figures>,
    pub purchases: Figures,
    pub attack: AttackReport,
}

/// `http://HOST:PORT[/...]` as a socket address; only a loopback IP literal is accepted,
/// so the tool cannot be pointed anywhere else.
pub fn loopback(url: &str) -> anyhow::Result<SocketAddr> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url}: only http:// URLs"))?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let address: SocketAddr = authority
        .parse()
        .with_context(|| format!("{url}: HOST:PORT with HOST an IP address"))?;
    anyhow::ensure!(address.ip().is_loopback(), "{url}: loopback addresses only");
    Ok(address)
}

/// Users and addresses enough for every purchase the run can send.
fn purchases_needed(config: &Config) -> u64 {
    (config.purchase_rate * config.duration.saturating_sub(config.warmup).as_secs_f64()).ceil()
        as u64
        + 1
}

pub async fn run(config: Config) -> anyhow::Result<Report> {
    loopback(&config.target)?;
    if let Some(probe) = &config.probe_target {
        loopback(probe)?;
    }
    anyhow::ensure!(
        config.attack.target.ip().is_loopback()
            && config.attack.source.is_loopback()
            && config.client_source.is_loopback(),
        "loopback addresses only"
    );
    anyhow::ensure!(
        config.duration > config.warmup,
        "the warm-up outlasts the attack"
    );
    let target = config.target.trim_end_matches('/').to_string();
    let probe_target = config
        .probe_target
        .as_deref()
        .map(|p| p.trim_end_matches('/').to_string());

    // Before the attack: the item, and a token for each buyer (keep-alive client).
    let setup = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let needed = purchases_needed(&config);
    let item = crate::create_item(&setup, &target, needed as i64 + 10, &config.admin_token).await?;
    crate::wait_until_listed(&setup, std::slice::from_ref(&target), item).await?;
    let users = config.first_user..config.first_user + needed as i64;
    let tokens = Arc::new(crate::login(&setup, &target, users).await?);
    drop(setup);

    // Everyone else: a new connection per request.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(config.request_timeout)
        .local_address(config.client_source)
        .tcp_nodelay(true)
        .build()?;

    if let Some(path) = &config.started_file {
        std::fs::write(path, b"").with_context(|| format!("writing {}", path.display()))?;
    }
    let start = Instant::now();
    let measured_from = start + config.warmup;
    let measured_to = start + config.duration;
    // A bound the attack never outlives, whatever the measured requests do.
    let hard_end = measured_to + config.request_timeout + Duration::from_secs(5);
    let attack = Arc::new(config.attack.clone());
    let live = Arc::new(Live::default());
    let slots: Vec<_> = (0..attack.sockets)
        .map(|i| {
            tokio::spawn(attack::slot(
                i,
                Arc::clone(&attack),
                Arc::clone(&live),
                hard_end,
            ))
        })
        .collect();
    let sampler = {
        let live = Arc::clone(&live);
        tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut tick = tokio::time::interval_at(measured_from, Duration::from_millis(100));
            while tick.tick().await < measured_to {
                samples.push(live.open.load(Ordering::Relaxed));
            }
            samples
        })
    };
    let counts: [Arc<Counts>; 3] = Default::default();
    let progress = config
        .progress
        .then(|| tokio::spawn(progress(start, Arc::clone(&live), counts.clone())));

    let main_live = {
        let (client, url) = (client.clone(), format!("{target}/health/live"));
        open_model(
            config.liveness_rate,
            measured_from,
            measured_to,
            Arc::clone(&counts[0]),
            move |_| outcome_of_get(client.clone(), url.clone()),
        )
    };
    let probe_live = {
        let (client, url) = (
            client.clone(),
            probe_target.as_ref().map(|p| format!("{p}/health/live")),
        );
        let rate = if url.is_some() {
            config.liveness_rate
        } else {
            0.0
        };
        open_model(
            rate,
            measured_from,
            measured_to,
            Arc::clone(&counts[1]),
            move |_| outcome_of_get(client.clone(), url.clone().unwrap_or_default()),
        )
    };
    let purchases = {
        let (client, url, tokens) = (
            client.clone(),
            format!("{target}/seckill"),
            Arc::clone(&tokens),
        );
        let (first_user, first_ip) = (config.first_user, config.first_ip);
        open_model(
            config.purchase_rate,
            measured_from,
            measured_to,
            Arc::clone(&counts[2]),
            move |n| {
                let token = tokens
                    .get(&(first_user + n as i64))
                    .cloned()
                    .unwrap_or_default();
                let request = client
                    .post(url.clone())
                    .bearer_auth(token)
                    .header(
                        "X-Forwarded-For",
                        crate::ip_of(first_ip.wrapping_add(n as u32)),
                    )
                    .json(&serde_json::json!({ "itemId": item }));
                async move { outcome_of(request.send().await).await }
            },
        )
    };
    let (main_live, probe_live, purchases) = tokio::join!(main_live, probe_live, purchases);

    live.stop();
    let mut slot_stats = Vec::with_capacity(slots.len());
    for slot in slots {
        slot_stats.push(slot.await.context("an attacker socket's task")?);
    }
    let attack_seconds = start.elapsed().as_secs_f64();
    if let Some(progress) = progress {
        progress.abort();
        eprintln!();
    }
    let open_samples = sampler.await.context("the sampler")?;
    Ok(Report {
        target,
        probe_target,
        item_id: item,
        attack_seconds,
        measured_from_s: config.warmup.as_secs_f64(),
        measured_to_s: config.duration.as_secs_f64(),
        liveness_rate: config.liveness_rate,
        purchase_rate: config.purchase_rate,
        request_timeout_ms: config.request_timeout.as_millis() as u64,
        liveness_main: Figures::of(&main_live),
        liveness_probe: config
            .probe_target
            .as_ref()
            .map(|_| Figures::of(&probe_live)),
        purchases: Figures::of(&purchases),
        attack: attack::report(&attack, slot_stats, &open_samples, attack_seconds),
    })
}

fn outcome_of_get(
    client: reqwest::Client,
    url: String,
) -> impl std::future::Future<Output = measure::Outcome> + Send + 'static {
    let request = client.get(url);
    async move { outcome_of(request.send().await).await }
}

async fn progress(start: Instant, live: Arc<Live>, counts: [Arc<Counts>; 3]) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    tick.tick().await;
    loop {
        tick.tick().await;
        let c = |i: usize| {
            format!(
                "{}/{}",
                counts[i].answered.load(Ordering::Relaxed),
                counts[i].sent.load(Ordering::Relaxed)
            )
        };
        eprint!(
            "\r[{:>4.0}s] attacker open {:>5}, connects {:>7} | answered/sent: live {} probe {} purchases {}   ",
            start.elapsed().as_secs_f64(),
            live.open.load(Ordering::Relaxed),
            live.established.load(Ordering::Relaxed),
            c(0),
            c(1),
            c(2)
        );
    }
}

impl Report {
    /// The summary table, on stdout.
    pub fn print(&self) {
        let a = &self.attack;
        println!(
            "slowloris: {} sockets from {} on {}, a byte every {} ms, {:.1} s; measured sends {:.0}-{:.0} s, timeout {} ms",
            a.sockets,
            a.source,
            self.target,
            a.byte_every_ms,
            self.attack_seconds,
            self.measured_from_s,
            self.measured_to_s,
            self.request_timeout_ms
        );
        println!(
            "{:<16} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10}  outcomes",
            "", "sent", "answered", "p50 ms", "p99 ms", "max ms", "slowest"
        );
        let mut rows = vec![("liveness main", &self.liveness_main)];
        if let Some(probe) = &self.liveness_probe {
            rows.push(("liveness probe", probe));
        }
        rows.push(("purchases", &self.purchases));
        for (name, f) in rows {
            println!(
                "{name:<16} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10}  {}",
                f.sent,
                f.answered,
                ms(f.p50_ms),
                ms(f.p99_ms),
                ms(f.max_ms),
                ms(f.slowest_answer_ms),
                counts(&f.outcomes)
            );
        }
        println!(
            "attacker: open at once mean {:.0} (min {}, max {}); connects {} ({:.0}/s), established {}, failed: {}",
            a.held_open.mean,
            a.held_open.min,
            a.held_open.max,
            a.connects_attempted,
            a.connects_per_sec,
            a.connects_established,
            counts(&a.connect_failures)
        );
        println!(
            "attacker: closed by the server {} (open for p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms); answers before the close: {}",
            a.closed_by_server,
            a.lifetime_ms.p50,
            a.lifetime_ms.p90,
            a.lifetime_ms.max,
            counts(&a.answers_before_close)
        );
    }
}

/// A latency, or `unanswered` where the percentile falls on a request with no answer.
fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "unanswered".into(), |v| format!("{v:.1}"))
}

fn counts(map: &std::collections::BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    map.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("  ")
}

#[cfg(test)]
mod tests {
    use super::loopback;

    #[test]
    fn only_loopback_targets_are_accepted() {
        assert_eq!(
            loopback("http://127.0.0.1:8080/").unwrap().to_string(),
            "127.0.0.1:8080"
        );
        assert!(loopback("http://[::1]:8080").is_ok());
        assert!(loopback("http://10.0.0.1:8080").is_err());
        assert!(
            loopback("http://localhost:8080").is_err(),
            "an IP literal only"
        );
        assert!(loopback("https://127.0.0.1:8080").is_err());
    }
}
