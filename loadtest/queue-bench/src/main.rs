//! `queue`: the waiting room's bench scenarios (see the `queue_bench` library), one per
//! subcommand, against instances on loopback. Prints the figures and the checks (and
//! `--json`); exits 0 when every check passed, 1 when one failed, 2 when the run could
//! not be made.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use loadtest_core::stores::Stores;
use queue_bench::{
    exactness::Exactness, fairness::Fairness, fifo::Fifo, inlet::Inlet, poll_cost::PollCost, Lines,
    ScenarioReport, Site,
};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Base URL of an instance; repeat for several. Loopback only.
    #[arg(
        long = "target",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    targets: Vec<String>,
    #[arg(
        long,
        env = "SECKILL_ADMIN_TOKEN",
        default_value = "dev-admin-token",
        global = true
    )]
    admin_token: String,
    /// First user id of the crowd.
    #[arg(long, default_value_t = 1, global = true)]
    first_user: i64,
    /// Index of the crowd's first X-Forwarded-For address.
    #[arg(long, default_value_t = 0, global = true)]
    first_ip: u32,
    /// The seed of every random choice of the crowd.
    #[arg(long, default_value_t = 24, global = true)]
    seed: u64,
    /// Postgres and Redis of the instances, for the store checks.
    #[arg(long, env = "DATABASE_URL", global = true)]
    database_url: Option<String>,
    #[arg(long, env = "REDIS_URL", global = true)]
    redis_url: Option<String>,
    #[arg(
        long,
        env = "SECKILL_REDIS_KEY_PREFIX",
        default_value = "seckill",
        global = true
    )]
    redis_prefix: String,
    /// Write the figures and checks as JSON here.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Bot operators in a crowd: units per operator, with the room or without.
    Fairness {
        /// Straight at POST /seckill, no room.
        #[arg(long)]
        no_room: bool,
        #[arg(long, default_value_t = 18_000)]
        humans: u32,
        #[arg(long, default_value_t = 10)]
        operators: u32,
        #[arg(long, default_value_t = 200)]
        per_operator: u32,
        #[arg(long, default_value_t = 500)]
        stock: i64,
        /// Seconds from the item's creation to the sale's start (the pre-queue).
        #[arg(long, default_value_t = 30.0)]
        lead: f64,
        #[arg(long, default_value_t = 50)]
        admit_per_second: u32,
        #[arg(long, default_value_t = 500)]
        max_active: u32,
        /// Milliseconds between two polls of a bot.
        #[arg(long, default_value_t = 200)]
        bot_poll_ms: u64,
        /// The run ends this many seconds after the start at the latest.
        #[arg(long, default_value_t = 90.0)]
        after_start: f64,
    },
    /// A fifo room, joiners arriving over time: positions and admissions in order.
    Fifo {
        #[arg(long, default_value_t = 3_000)]
        shoppers: u32,
        /// Seconds over which the shoppers join.
        #[arg(long, default_value_t = 30.0)]
        join_over: f64,
        #[arg(long, default_value_t = 50)]
        admit_per_second: u32,
        /// Seconds between polls (default: the room's refreshIntervalSeconds).
        #[arg(long)]
        poll_every: Option<f64>,
    },
    /// Polls against the sold-out path, closed loop, in pairs; Redis calls per poll.
    PollCost {
        /// Tickets the polls go round: enough that each stays within its poll bucket
        /// (one a second, 20 at once) at ~40 000 polls a second over 8 s phases, about
        /// two a second each during a poll phase and none during a sold-out one, so
        /// every poll measured is a 200, not a 429.
        #[arg(long, default_value_t = 20_000)]
        shoppers: u32,
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        #[arg(long, default_value_t = 8.0)]
        seconds: f64,
        #[arg(long, default_value_t = 3)]
        pairs: u32,
        /// The server's pid, for its CPU per request.
        #[arg(long)]
        server_pid: Option<u32>,
        #[arg(long, default_value_t = 100)]
        clk_tck: u64,
    },
    /// Admissions per second and live passes, sampled from the admin view.
    Inlet {
        #[arg(long, default_value_t = 4_000)]
        shoppers: u32,
        #[arg(long, default_value_t = 5_000)]
        stock: i64,
        #[arg(long, default_value_t = 50)]
        admit_per_second: u32,
        #[arg(long, default_value_t = 5_000)]
        max_active: u32,
        #[arg(long, default_value_t = 300)]
        pass_ttl_secs: u32,
        /// Seconds from the item's creation to the sale's start.
        #[arg(long, default_value_t = 20.0)]
        lead: f64,
        /// Seconds measured, from one second after the start.
        #[arg(long, default_value_t = 60.0)]
        measure: f64,
        #[arg(long, default_value_t = 250)]
        sample_ms: u64,
        /// Judge only the cap (maxActive), not the rate.
        #[arg(long)]
        cap_only: bool,
    },
    /// Two instances, the first SIGKILLed mid-queue by whoever watches --kill-file.
    Exactness {
        #[arg(long, default_value_t = 3_000)]
        shoppers: u32,
        #[arg(long, default_value_t = 1_500)]
        stock: i64,
        #[arg(long, default_value_t = 100)]
        admit_per_second: u32,
        #[arg(long, default_value_t = 500)]
        max_active: u32,
        #[arg(long, default_value_t = 20.0)]
        lead: f64,
        /// Seconds after the sale's start at which --kill-file is written.
        #[arg(long, default_value_t = 6.0)]
        kill_after: f64,
        #[arg(long)]
        kill_file: PathBuf,
        #[arg(long, default_value_t = 60.0)]
        after_start: f64,
    },
}

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("queue: {message}");
    std::process::exit(2);
}

/// Prints the report, writes its JSON, and exits as its checks say.
fn finish<F: Serialize + Lines>(report: ScenarioReport<F>, json: Option<&PathBuf>) -> ! {
    report.print();
    if let Some(path) = json {
        let written = serde_json::to_string_pretty(&report)
            .map_err(anyhow::Error::from)
            .and_then(|text| Ok(std::fs::write(path, text)?));
        if let Err(e) = written {
            fail(format!("writing {}: {e:#}", path.display()));
        }
    }
    std::process::exit(if report.passed() { 0 } else { 1 });
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let site =
        Site::new(&args.targets, &args.admin_token).unwrap_or_else(|e| fail(format!("{e:#}")));
    let stores = match (&args.database_url, &args.redis_url) {
        (Some(database_url), Some(redis_url)) => Some(Stores {
            database_url: database_url.clone(),
            redis_url: redis_url.clone(),
            redis_prefix: args.redis_prefix.clone(),
        }),
        _ => None,
    };
    let secs = Duration::from_secs_f64;
    let json = args.json.as_ref();
    let (first_user, first_ip, seed) = (args.first_user, args.first_ip, args.seed);
    // Every scenario stops by itself; this bound only keeps a stuck one from running on.
    let bound = Duration::from_secs(900);
    macro_rules! within {
        ($run:expr) => {
            match tokio::time::timeout(bound, $run).await {
                Ok(Ok(report)) => finish(report, json),
                Ok(Err(e)) => fail(format!("{e:#}")),
                Err(_) => fail(format!("did not finish within {bound:?}")),
            }
        };
    }
    match args.scenario {
        Scenario::Fairness {
            no_room,
            humans,
            operators,
            per_operator,
            stock,
            lead,
            admit_per_second,
            max_active,
            bot_poll_ms,
            after_start,
        } => within!(queue_bench::fairness::run(
            site,
            Fairness {
                room: !no_room,
                humans,
                operators,
                per_operator,
                first_user,
                first_ip,
                stock,
                lead: secs(lead),
                admit_per_second,
                max_active,
                bot_poll: Duration::from_millis(bot_poll_ms),
                after_start: secs(after_start),
                seed,
                stores,
            }
        )),
        Scenario::Fifo {
            shoppers,
            join_over,
            admit_per_second,
            poll_every,
        } => within!(queue_bench::fifo::run(
            site,
            Fifo {
                shoppers,
                first_user,
                first_ip,
                join_over: secs(join_over),
                admit_per_second,
                poll_every: poll_every.map(secs),
                seed,
            }
        )),
        Scenario::PollCost {
            shoppers,
            concurrency,
            seconds,
            pairs,
            server_pid,
            clk_tck,
        } => within!(queue_bench::poll_cost::run(
            site,
            PollCost {
                shoppers,
                first_user,
                first_ip,
                concurrency,
                seconds,
                pairs,
                server_pid,
                clk_tck,
            }
        )),
        Scenario::Inlet {
            shoppers,
            stock,
            admit_per_second,
            max_active,
            pass_ttl_secs,
            lead,
            measure,
            sample_ms,
            cap_only,
        } => within!(queue_bench::inlet::run(
            site,
            Inlet {
                shoppers,
                first_user,
                first_ip,
                stock,
                admit_per_second,
                max_active,
                pass_ttl_secs,
                lead: secs(lead),
                measure: secs(measure),
                sample_every: Duration::from_millis(sample_ms),
                rate_goal: !cap_only,
                seed,
            }
        )),
        Scenario::Exactness {
            shoppers,
            stock,
            admit_per_second,
            max_active,
            lead,
            kill_after,
            kill_file,
            after_start,
        } => {
            let stores = stores.unwrap_or_else(|| {
                fail("exactness needs --database-url and --redis-url (or DATABASE_URL, REDIS_URL)")
            });
            within!(queue_bench::exactness::run(
                site,
                Exactness {
                    shoppers,
                    first_user,
                    first_ip,
                    stock,
                    admit_per_second,
                    max_active,
                    lead: secs(lead),
                    kill_after: secs(kill_after),
                    kill_file,
                    after_start: secs(after_start),
                    seed,
                    stores,
                }
            ))
        }
    }
}
