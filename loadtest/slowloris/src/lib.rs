//! A slowloris against one instance, on loopback, with everyone else measured meanwhile
//! (`slowloris` binary; `scripts/slowloris.sh` runs it, docs/soak.md has the figures).
//!
//! The attack: `sockets` connections spread over `addresses` loopback source addresses
//! (a botnet; not 127.0.0.1, which the app trusts as a proxy and exempts from the
//! per-address cap), each sending a request head that never ends, a byte per tick,
//! reopened as soon as the server closes it ([`attack`]). Everyone else, in an open model
//! ([`measure`]): `GET /health/live` on the service's port and on the probe listener's,
//! and purchases by distinct users behind distinct `X-Forwarded-For` addresses through
//! 127.0.0.1, each request on a new connection; first for `baseline` without the attack,
//! then from the end of the warm-up to the end of the attack. The attack goes on until
//! the last of them is answered or timed out, then everything stops.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use loadtest_core::client::loopback;
use tokio::time::Instant;

pub mod attack;
pub mod measure;
mod report;

use attack::{Attack, Live};
use measure::{Counts, Figures, Traffic};
pub use report::{Baseline, SlowlorisReport};

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
    /// Everyone else measured this long before the attack, the same traffic without it
    /// (zero: not at all).
    pub baseline: Duration,
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

/// Users and addresses enough for every purchase sent over `window`.
fn purchases_needed(config: &Config, window: Duration) -> u64 {
    (config.purchase_rate * window.as_secs_f64()).ceil() as u64 + 1
}

/// Runs `traffic` on a thread (and runtime) of its own, see [`measure::everyone_else`].
async fn measure_on_a_thread(
    traffic: Traffic,
    counts: [Arc<Counts>; 3],
) -> anyhow::Result<measure::Measured> {
    let (sender, measured) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("everyone-else".into())
        .spawn(move || {
            let _ = sender.send(measure::everyone_else(traffic, counts));
        })
        .context("starting the measuring thread")?;
    measured.await.context("the measuring thread")?
}

pub async fn run(config: Config) -> anyhow::Result<SlowlorisReport> {
    loopback(&config.target)?;
    if let Some(probe) = &config.probe_target {
        loopback(probe)?;
    }
    let last_source = attack::nth_address(config.attack.source, config.attack.addresses.max(1) - 1);
    anyhow::ensure!(
        config.attack.target.ip().is_loopback()
            && config.attack.source.is_loopback()
            && last_source.is_loopback()
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
    let before = if config.baseline.is_zero() {
        0
    } else {
        purchases_needed(&config, config.baseline)
    };
    let needed = before + purchases_needed(&config, config.duration.saturating_sub(config.warmup));
    let item =
        loadtest_core::setup::create_item(&setup, &target, needed as i64 + 10, &config.admin_token)
            .await?;
    loadtest_core::setup::wait_until_listed(&setup, std::slice::from_ref(&target), item).await?;
    let users = config.first_user..config.first_user + needed as i64;
    let tokens = loadtest_core::setup::login(&setup, &target, users).await?;
    drop(setup);
    let traffic = |from: Instant, to: Instant, first: u64| Traffic {
        main_live: format!("{target}/health/live"),
        probe_live: probe_target.as_ref().map(|p| format!("{p}/health/live")),
        purchase: format!("{target}/seckill"),
        item,
        tokens: tokens.clone(),
        first_user: config.first_user + first as i64,
        first_ip: config.first_ip + first as u32,
        liveness_rate: config.liveness_rate,
        purchase_rate: config.purchase_rate,
        client_source: config.client_source,
        timeout: config.request_timeout,
        from,
        to,
    };

    // The same traffic without the attack, first, to compare with.
    let baseline = if config.baseline.is_zero() {
        None
    } else {
        let from = Instant::now();
        let measured =
            measure_on_a_thread(traffic(from, from + config.baseline, 0), Default::default())
                .await?;
        Some(Baseline {
            seconds: config.baseline.as_secs_f64(),
            liveness_main: Figures::of(&measured.main_live),
            liveness_probe: config
                .probe_target
                .as_ref()
                .map(|_| Figures::of(&measured.probe_live)),
            purchases: Figures::of(&measured.purchases),
        })
    };

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

    let measured = measure_on_a_thread(traffic(measured_from, measured_to, before), counts).await;

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
    let measured = measured?;
    Ok(SlowlorisReport {
        target,
        probe_target,
        item_id: item,
        attack_seconds,
        measured_from_s: config.warmup.as_secs_f64(),
        measured_to_s: config.duration.as_secs_f64(),
        liveness_rate: config.liveness_rate,
        purchase_rate: config.purchase_rate,
        request_timeout_ms: config.request_timeout.as_millis() as u64,
        liveness_main: Figures::of(&measured.main_live),
        liveness_probe: config
            .probe_target
            .as_ref()
            .map(|_| Figures::of(&measured.probe_live)),
        purchases: Figures::of(&measured.purchases),
        baseline,
        attack: attack::report(&attack, slot_stats, &open_samples, attack_seconds),
    })
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
