//! `slowloris`: one client holds trickling connections open against an instance while
//! everyone else is measured (see the `slowloris` library). Loopback only; stops by itself.
//! Prints a table (and `--json`); exits 0 when the measurement was made, 2 when not.

use std::net::IpAddr;
use std::time::Duration;

use clap::Parser;
use loadtest_core::client::loopback;
use slowloris::{attack::Attack, Config};

#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The service: attacked, and measured (loopback IP literal).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    target: String,
    /// The probe listener: measured only, and may not answer (a build without one).
    #[arg(long)]
    probe_target: Option<String>,
    /// Attacker sockets.
    #[arg(long, default_value_t = 4400)]
    sockets: usize,
    /// The attacker's first source address: a loopback address the app does not trust.
    #[arg(long, default_value = "127.0.1.1")]
    source: IpAddr,
    /// Source addresses the sockets are spread over, from --source on (a botnet; 44
    /// sockets each by default, under the app's 64 per address).
    #[arg(long, default_value_t = 100)]
    addresses: u32,
    /// Milliseconds between two bytes of a socket's head.
    #[arg(long, default_value_t = 200)]
    byte_every_ms: u64,
    /// Milliseconds before a socket the server closed is reopened (0: at once).
    #[arg(long, default_value_t = 0)]
    reopen_delay_ms: u64,
    #[arg(long, default_value_t = 10_000)]
    connect_timeout_ms: u64,
    /// Seconds of attack; measured requests are sent from --warmup until then.
    #[arg(long, default_value_t = 60.0)]
    duration: f64,
    #[arg(long, default_value_t = 5.0)]
    warmup: f64,
    /// Seconds of the same measured traffic before the attack, without it (0: none).
    #[arg(long, default_value_t = 20.0)]
    baseline: f64,
    /// Where the measured clients connect from (127.0.0.1: the trusted proxy, so the
    /// purchases' X-Forwarded-For is believed).
    #[arg(long, default_value = "127.0.0.1")]
    client_source: IpAddr,
    /// GET /health/live per second, on each port.
    #[arg(long, default_value_t = 20.0)]
    liveness_rate: f64,
    /// POST /seckill per second, each by a new user from a new address.
    #[arg(long, default_value_t = 5.0)]
    purchase_rate: f64,
    /// Milliseconds a measured request may take before it counts as a timeout.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", default_value = "dev-admin-token")]
    admin_token: String,
    #[arg(long, default_value_t = 1)]
    first_user: i64,
    /// Index of the first X-Forwarded-For address (10.100.0.0 onwards).
    #[arg(long, default_value_t = 0)]
    first_ip: u32,
    /// Created when the attack begins (after the item and the logins).
    #[arg(long)]
    started_file: Option<std::path::PathBuf>,
    /// Write the report as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
    /// Niceness of the attacker's threads (0: as the measured clients'). On loopback the
    /// attacker shares the server's cores, which a botnet's would not: the measured
    /// clients keep the tool's own priority.
    #[arg(long, default_value_t = 10)]
    attacker_nice: i32,
}

/// The soft limit on open files (`Max open files` in /proc/self/limits), when readable.
fn open_files_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line.split_whitespace().nth(3)?;
    if soft == "unlimited" {
        Some(u64::MAX)
    } else {
        soft.parse().ok()
    }
}

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("slowloris: {message}");
    std::process::exit(2);
}

/// Lowers the calling thread's priority to `nice` (on Linux, niceness is a thread's own;
/// threads it starts inherit it). Best effort: the run goes on at the same priority.
fn lower_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    // SAFETY: setpriority has no memory effects; `0` names the calling thread.
    let failed = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) } != 0;
    if failed {
        eprintln!("slowloris: could not lower the attacker's priority; going on");
    }
}

fn main() {
    let args = Args::parse();
    // The attacker's sockets are tasks on the runtime's worker threads, lowered; the
    // measured clients run on threads of their own started from this one (`run`'s
    // body runs here, in `block_on`), which keep its priority.
    let nice = args.attacker_nice;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(move || lower_priority(nice))
        .build()
        .unwrap_or_else(|e| fail(format!("starting the runtime: {e}")));
    runtime.block_on(attack_and_measure(args));
}

async fn attack_and_measure(args: Args) {
    let target = loopback(&args.target).unwrap_or_else(|e| fail(format!("{e:#}")));
    // Every attacker socket, and every measured request that may be waiting for its
    // timeout at once, is a file descriptor.
    let timeout = Duration::from_millis(args.timeout_ms);
    let waiting = (2.0 * args.liveness_rate + args.purchase_rate) * timeout.as_secs_f64();
    let needed = args.sockets as u64 + waiting.ceil() as u64 + 256;
    match open_files_limit() {
        Some(limit) if limit < needed => fail(format!(
            "the open-files limit is {limit}, the run needs about {needed}: raise it first (ulimit -n)"
        )),
        Some(_) => {}
        None => eprintln!("slowloris: could not read the open-files limit; going on"),
    }
    let duration = Duration::from_secs_f64(args.duration);
    let config = Config {
        target: args.target.clone(),
        probe_target: args.probe_target.clone(),
        attack: Attack {
            target,
            source: args.source,
            addresses: args.addresses.max(1),
            sockets: args.sockets,
            tick: Duration::from_millis(args.byte_every_ms.max(1)),
            reopen_delay: Duration::from_millis(args.reopen_delay_ms),
            connect_timeout: Duration::from_millis(args.connect_timeout_ms),
        },
        client_source: args.client_source,
        duration,
        warmup: Duration::from_secs_f64(args.warmup),
        baseline: Duration::from_secs_f64(args.baseline),
        liveness_rate: args.liveness_rate,
        purchase_rate: args.purchase_rate,
        request_timeout: timeout,
        admin_token: args.admin_token.clone(),
        first_user: args.first_user,
        first_ip: args.first_ip,
        started_file: args.started_file.clone(),
        progress: !args.quiet,
    };
    // The set-up (item, logins) gets two minutes; the attack stops itself well before
    // this bound, which is only there so nothing can keep the tool running.
    let bound = Duration::from_secs(120)
        + Duration::from_secs_f64(args.baseline)
        + duration
        + 3 * timeout
        + Duration::from_secs(30);
    let report = match tokio::time::timeout(bound, slowloris::run(config)).await {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => fail(format!("{e:#}")),
        Err(_) => fail(format!("did not finish within {bound:?}")),
    };
    report.print();
    if let Some(path) = &args.json {
        let written = serde_json::to_string_pretty(&report)
            .map_err(anyhow::Error::from)
            .and_then(|json| Ok(std::fs::write(path, json)?));
        if let Err(e) = written {
            fail(format!("writing {}: {e:#}", path.display()));
        }
    }
}
