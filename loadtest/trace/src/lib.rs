//! One trace through every limiting algorithm (`trace` binary;
//! `scripts/bench/limiting.sh` runs it in `make bench`, docs/limiting.md has the table).
//!
//! A trace of a million-odd requests over ten thousand-odd keys, generated from a seed,
//! is replayed through each algorithm's script in Redis on the trace's own clock, and
//! every decision is held against the sliding-window log's (the exact one); then the
//! memory of a key and the Redis CPU of a call, per algorithm. In the order a run uses
//! them:
//! - [`workload`]: the trace (who sends when) and its shares;
//! - [`algorithm`]: the six scripts and their rule parameters;
//! - [`calls`]: script calls in pipelines, and the replies' decisions;
//! - [`replay`]: the trace through one script;
//! - [`model`]: each algorithm again, offline, from its script's header, to check the
//!   replay and the scripts;
//! - [`figures`]: agreement with the log, overshoot, delays;
//! - [`cost`]: memory per key, CPU per call;
//! - [`report`]: the tables (Markdown) and the discussion.

use std::time::Instant;

use anyhow::Context;
use redis::aio::MultiplexedConnection;

pub mod algorithm;
pub mod calls;
pub mod cost;
pub mod figures;
pub mod model;
pub mod replay;
pub mod report;
pub mod workload;

use algorithm::Algorithm;
use calls::{Answer, Namespace, Scripts};
use cost::{Fill, Memory, Stat};
use figures::{Against, Overshoot};
use model::Estimates;
use workload::{Shape, Trace, LIMIT, WINDOW_MS};

#[derive(Debug, Clone)]
pub struct Config {
    pub redis_url: String,
    pub shape: Shape,
    /// Requests per pipeline (at least; see `replay::batches`).
    pub batch: usize,
    /// Calls per CPU run, and runs per figure (their median).
    pub cpu_calls: usize,
    pub cpu_runs: usize,
}

/// One algorithm's figures over the trace.
#[derive(Debug, Clone)]
pub struct Row {
    pub algorithm: Algorithm,
    pub against: Against,
    /// By arrival; the shaper's also by departure (arrival + delay) in `departures`.
    pub overshoot: Overshoot,
    pub departures: Option<Overshoot>,
    /// The shaper's delays: median, p99, greatest (ms).
    pub delays: Option<(u32, u32, u32)>,
    /// Requests its model decides otherwise (a delay counts), and the first of them.
    pub off_model: (usize, Option<usize>),
    pub seconds: f64,
    pub memory: [Memory; 2],
    /// Redis µs per call, admitted and refused (medians).
    pub cpu: [f64; 2],
}

/// Where two answers to one request part: the request, its key's requests up to it
/// (trace index, ms since the start), and the two answers.
#[derive(Debug, Clone)]
pub struct Parting {
    pub what: String,
    pub count: usize,
    pub request: usize,
    pub key: u32,
    pub history: Vec<(usize, i64)>,
    pub answers: (Answer, Answer),
}

pub struct TraceReport {
    pub trace: Trace,
    pub rows: Vec<Row>,
    pub estimates: Estimates,
    /// Token bucket against GCRA (they must agree), and any script against its model.
    pub partings: Vec<Parting>,
    pub ping_us: f64,
    /// Calls of other clients counted in the CPU figures kept.
    pub foreign_calls: u64,
    pub batch: usize,
    pub cpu_calls: usize,
    pub cpu_runs: usize,
    pub redis_version: String,
    pub seconds: f64,
}

/// The two memory cases: 100 per 60 s filled over a minute, 10 000 per 1 s in a second.
pub const MEMORY_CASES: [(i64, i64); 2] = [(WINDOW_MS, LIMIT), (1_000, 10_000)];

pub async fn run(config: Config) -> anyhow::Result<TraceReport> {
    let started = Instant::now();
    let mut conn = calls::connect(&config.redis_url).await?;
    let stamp = chrono::Utc::now().timestamp_millis();
    // Under `bench-`, so the bench's start-up sweeps what an interrupted run left.
    let keys = Namespace {
        prefix: format!("bench-trace-{stamp}"),
        tag: stamp as u64,
    };
    let result = measure(&config, &mut conn, &keys).await;
    let gone = calls::forget(&mut conn, &keys.prefix).await;
    let mut report = result?;
    eprintln!("trace: {} keys unlinked", gone?);
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

async fn measure(
    config: &Config,
    conn: &mut MultiplexedConnection,
    keys: &Namespace,
) -> anyhow::Result<TraceReport> {
    let generating = Instant::now();
    let trace = Trace::generate(config.shape.clone());
    eprintln!(
        "trace: {} requests over {} keys generated in {:.1} s",
        trace.requests.len(),
        trace.keys.len(),
        generating.elapsed().as_secs_f64()
    );
    let scripts = Scripts::load(conn).await?;
    let redis_version = redis_version(conn).await?;
    let batches = replay::batches(&trace, config.batch);

    let mut answers: Vec<Vec<Answer>> = Vec::new();
    let mut rows = Vec::new();
    let mut partings = Vec::new();
    let mut estimates = Estimates::default();
    for algorithm in Algorithm::ALL {
        let replayed = replay::replay(
            conn,
            scripts.sha(algorithm),
            algorithm,
            &trace,
            &batches,
            &keys.within(algorithm.name()),
        )
        .await?;
        eprintln!(
            "trace: {} replayed in {:.1} s",
            algorithm.name(),
            replayed.seconds
        );
        let (modelled, counted) = model::answers(algorithm, &trace, WINDOW_MS, LIMIT);
        if algorithm == Algorithm::SlidingWindowCounter {
            estimates = counted;
        }
        let off_model = figures::parting(&replayed.answers, &modelled, true);
        if let (count, Some(first)) = off_model {
            partings.push(parting(
                &trace,
                format!("{} against its model (script, model)", algorithm.name()),
                count,
                first,
                (replayed.answers[first], modelled[first]),
            ));
        }
        let log = answers.first().unwrap_or(&replayed.answers);
        let shaper = algorithm == Algorithm::LeakyBucket;
        rows.push(Row {
            algorithm,
            against: figures::against(log, &replayed.answers),
            overshoot: figures::overshoot(
                &trace,
                &replayed.answers,
                false,
                WINDOW_MS,
                LIMIT as usize,
            ),
            departures: shaper.then(|| {
                figures::overshoot(&trace, &replayed.answers, true, WINDOW_MS, LIMIT as usize)
            }),
            delays: shaper.then(|| figures::delays(&replayed.answers)),
            off_model,
            seconds: replayed.seconds,
            memory: [Memory::default(); 2],
            cpu: [0.0; 2],
        });
        answers.push(replayed.answers);
    }
    let (bucket, gcra) = (
        &answers[Algorithm::TokenBucket as usize],
        &answers[Algorithm::Gcra as usize],
    );
    if let (count, Some(first)) = figures::parting(bucket, gcra, false) {
        partings.push(parting(
            &trace,
            "token_bucket against gcra (token_bucket, gcra)".into(),
            count,
            first,
            (bucket[first], gcra[first]),
        ));
    }
    // The replay's keys go now: the CPU runs below should not share Redis with them.
    calls::forget(conn, &keys.prefix).await?;

    for row in &mut rows {
        for (case, (window_ms, threshold)) in MEMORY_CASES.into_iter().enumerate() {
            let memory_keys = keys.within(&format!("memory:{}", row.algorithm.name()));
            let fill = Fill {
                window_ms,
                threshold,
                calls: threshold as usize,
                span_ms: window_ms,
                start_ms: trace.start_ms,
            };
            row.memory[case] =
                cost::memory(conn, &scripts, row.algorithm, &memory_keys, fill).await?;
        }
    }
    eprintln!("trace: memory measured");

    let mut pings = Vec::new();
    let mut foreign_calls = 0;
    let mut cpu = vec![[Vec::new(), Vec::new()]; rows.len()];
    for run in 0..config.cpu_runs {
        let ping = cost::ping(conn, config.cpu_calls).await?;
        foreign_calls += ping.foreign;
        pings.push(ping.usec_per_call);
        for (i, row) in rows.iter().enumerate() {
            for (side, refused) in [false, true].into_iter().enumerate() {
                let stat =
                    cpu_run(conn, &scripts, row.algorithm, keys, config, run, refused).await?;
                foreign_calls += stat.foreign;
                cpu[i][side].push(stat.usec_per_call);
            }
        }
        eprintln!("trace: CPU run {} of {} done", run + 1, config.cpu_runs);
    }
    for (row, runs) in rows.iter_mut().zip(&mut cpu) {
        row.cpu = [median(&mut runs[0]), median(&mut runs[1])];
    }
    Ok(TraceReport {
        trace,
        rows,
        estimates,
        partings,
        ping_us: median(&mut pings),
        foreign_calls,
        batch: config.batch,
        cpu_calls: config.cpu_calls,
        cpu_runs: config.cpu_runs,
        redis_version,
        seconds: 0.0,
    })
}

/// One CPU run, made again (up to twice) when not every call was decided as meant or
/// another client's calls were counted with ours; the third is kept with them.
async fn cpu_run(
    conn: &mut MultiplexedConnection,
    scripts: &Scripts,
    algorithm: Algorithm,
    keys: &Namespace,
    config: &Config,
    run: usize,
    refused: bool,
) -> anyhow::Result<Stat> {
    for attempt in 0..3 {
        let side = if refused { "refused" } else { "admitted" };
        let run_keys = keys.within(&format!("cpu:{}:{side}:{run}:{attempt}", algorithm.name()));
        let (stat, as_meant) = cost::script_run(
            conn,
            scripts,
            algorithm,
            &run_keys,
            config.cpu_calls,
            refused,
        )
        .await?;
        if as_meant && (stat.foreign == 0 || attempt == 2) {
            return Ok(stat);
        }
        let why = if as_meant {
            format!("{} calls of another client counted", stat.foreign)
        } else {
            format!("not every call {side}")
        };
        eprintln!("trace: {} {side} run {run}: {why}, again", algorithm.name());
    }
    anyhow::bail!(
        "{}: three CPU runs in a row not decided as meant",
        algorithm.name()
    )
}

fn parting(
    trace: &Trace,
    what: String,
    count: usize,
    first: usize,
    answers: (Answer, Answer),
) -> Parting {
    let (key, history) = figures::history(trace, first, 12);
    Parting {
        what,
        count,
        request: first,
        key,
        history,
        answers,
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

async fn redis_version(conn: &mut MultiplexedConnection) -> anyhow::Result<String> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .map(|v| v.trim().to_string())
        .context("INFO server has no redis_version")
}
