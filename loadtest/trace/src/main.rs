//! `trace`: one generated trace through every limiting algorithm's script, each request
//! held against the sliding-window log's decision; then memory per key and Redis CPU per
//! call (see the `trace` library). Talks to Redis only (loopback). Prints the tables as
//! Markdown (and writes them to `--markdown`); exits 0 when the measurement was made, 2
//! when not. Answers that look wrong are reported, not failed on.

use std::path::PathBuf;

use clap::Parser;
use trace::{workload::Shape, Config};

#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1:6380")]
    redis_url: String,
    /// The seed of the trace.
    #[arg(long, default_value_t = 20_261_203)]
    seed: u64,
    /// At least this many requests...
    #[arg(long, default_value_t = 1_000_000)]
    requests: usize,
    /// ...from at least this many keys...
    #[arg(long, default_value_t = 10_000)]
    keys: usize,
    /// ...over this many windows of 60 s.
    #[arg(long, default_value_t = 10)]
    windows: i64,
    /// The share of the requests drawn from keys near their limit.
    #[arg(long, default_value_t = 0.25)]
    near_share: f64,
    /// Keys that burst at window edges.
    #[arg(long, default_value_t = 200)]
    bursters: usize,
    /// Requests per pipeline (at least).
    #[arg(long, default_value_t = 2_000)]
    batch: usize,
    /// Calls per CPU run, and runs per CPU figure.
    #[arg(long, default_value_t = 20_000)]
    cpu_calls: usize,
    #[arg(long, default_value_t = 3)]
    cpu_runs: usize,
    /// Also write the Markdown here.
    #[arg(long)]
    markdown: Option<PathBuf>,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let config = Config {
        redis_url: args.redis_url,
        shape: Shape {
            seed: args.seed,
            requests: args.requests,
            keys: args.keys,
            windows: args.windows,
            near_share: args.near_share,
            bursters: args.bursters,
        },
        batch: args.batch,
        cpu_calls: args.cpu_calls,
        cpu_runs: args.cpu_runs,
    };
    let report = match trace::run(config).await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("trace: {e:#}");
            std::process::exit(2);
        }
    };
    let markdown = report.markdown();
    print!("{markdown}");
    eprintln!(
        "trace: done in {:.0} s (Redis {})",
        report.seconds, report.redis_version
    );
    if let Some(path) = args.markdown {
        if let Err(e) = std::fs::write(&path, markdown) {
            eprintln!("trace: writing {}: {e}", path.display());
            std::process::exit(2);
        }
    }
}
