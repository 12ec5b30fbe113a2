//! The trace report as Markdown: the trace and its shares, the decisions table, memory and
//! CPU, anything that looked wrong, and a discussion written from the figures.

use std::fmt::Write;

use crate::algorithm::Algorithm;
use crate::calls::Answer;
use crate::workload::{
    Band, Kind, BURST_BACKGROUND, BURST_ODDS, BURST_SIZE, BURST_SPREAD_MS, LIMIT, PARETO_LEAST,
    PARETO_MOST, PARETO_SHAPE, WINDOW_MS,
};
use crate::{Row, TraceReport, MEMORY_CASES};

/// Cloudflare's published figures for its sliding-window counter.
const CLOUDFLARE_WRONG: f64 = 0.003;
const CLOUDFLARE_RATE_DIFFERENCE: f64 = 6.0;

impl TraceReport {
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        self.write_trace(&mut out);
        self.write_decisions(&mut out);
        self.write_costs(&mut out);
        self.write_partings(&mut out);
        self.write_discussion(&mut out);
        out
    }

    fn row(&self, algorithm: Algorithm) -> &Row {
        &self.rows[algorithm as usize]
    }

    fn write_trace(&self, out: &mut String) {
        let t = &self.trace;
        let total = t.requests.len();
        let _ = writeln!(
            out,
            "**The trace** (seed {}): {} requests from {} keys over {} windows of 60 s of trace \
             time ({} min), every key limited to **{LIMIT} requests per {} s**. The keys, the \
             steady ones by their rate over the whole trace:\n",
            t.shape.seed,
            thousands(total),
            thousands(t.keys.len()),
            t.shape.windows,
            t.span_ms / 60_000,
            WINDOW_MS / 1000,
        );
        out.push_str("| group | keys | requests | share of the requests |\n");
        out.push_str("|---|---:|---:|---:|\n");
        for (band, label) in [
            (
                Band::Near,
                "steady, within 10 % of the limit (0.9-1.1 times)",
            ),
            (Band::Below, "steady, below 0.9 times the limit"),
            (Band::Above, "steady, above 1.1 times the limit"),
        ] {
            let (keys, requests) = t.in_band(band);
            let _ = writeln!(
                out,
                "| {label} | {} | {} | {} |",
                thousands(keys),
                thousands(requests),
                percent(requests, total, 1)
            );
        }
        let (burst_keys, burst_key_requests) = t.of_kind(Kind::Burster);
        let _ = writeln!(
            out,
            "| edge bursters (below) | {} | {} | {} |",
            thousands(burst_keys),
            thousands(burst_key_requests),
            percent(burst_key_requests, total, 1)
        );
        let (near_keys, near_requests) = t.of_kind(Kind::Near);
        let (pareto_keys, pareto_requests) = t.of_kind(Kind::Pareto);
        let _ = writeln!(
            out,
            "\nHow the keys were drawn: {} keys at 0.9-1.1 times the limit, Poisson ({} \
             requests); {} edge bursters at {BURST_BACKGROUND} times the limit, Poisson, which \
             at each window edge inside the trace, with odds {BURST_ODDS}, send {}-{} requests \
             in the {} s before the edge and as many again in the {} s after it ({} bursts at an \
             edge, {} requests in them, {} of the trace); {} keys at Pareto rates (shape {PARETO_SHAPE}, {PARETO_LEAST}-{PARETO_MOST} times \
             the limit), Poisson ({} requests). The trace's clock starts on a window edge; \
             pipelines of at least {} requests, never cut in the 3 s before a window edge.\n",
            thousands(near_keys),
            thousands(near_requests),
            thousands(burst_keys),
            BURST_SIZE.0,
            BURST_SIZE.1,
            BURST_SPREAD_MS / 1000,
            BURST_SPREAD_MS / 1000,
            thousands(t.bursts),
            thousands(t.burst_requests),
            percent(t.burst_requests, total, 1),
            thousands(pareto_keys),
            thousands(pareto_requests),
            thousands(self.batch),
        );
    }

    fn write_decisions(&self, out: &mut String) {
        let total = self.trace.requests.len();
        out.push_str(
            "**The replay.** The limit as each algorithm takes it: `sliding_window`, \
             `fixed_window` and `sliding_window_counter` with `windowMs` 60 000 and `threshold` \
             100; `token_bucket` and `gcra` with `capacity` 100 refilled by 100 tokens per 60 000 \
             ms; `leaky_bucket` with `windowMs` 60 000, `threshold` 100 and `maxDelayMs` 60 000 \
             (its queue holds a window's worth). Each call is the app's: EVALSHA of the script \
             (loaded with SCRIPT LOAD), one key, ARGV[1] the request's time on the trace's clock \
             (ms), ARGV[2] a request id in the app's shape, ARGV[3] = 1 (one enforced rule, no \
             shadow), then those parameters. Each algorithm has keys of its own (deleted at the \
             end) and its own state: a request it decides otherwise than the log may follow from \
             an earlier one. \"Most admissions of one key in 60 s\" is the greatest number of a \
             key's admissions inside any 60 s (the log's window: the 60 s up to and including an \
             instant), from the admission times; the shaper's also by departure (arrival + the \
             delay it asked for, when its answer leaves). \"Answers off its model\": replies \
             (delays included) that differ from the algorithm's model, written from its \
             script's header and run offline; 0 means the replay was exact and the script did \
             what its header says, on this trace.\n\n",
        );
        out.push_str(
            "| algorithm | admitted | admitted where the log refused | refused where the log \
             admitted | most admissions of one key in 60 s | keys over 100 in 60 s | delay p50 \
             / p99 / max (ms) | replay (s) | answers off its model |\n",
        );
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        for row in &self.rows {
            let log = row.algorithm == Algorithm::SlidingWindow;
            let name = if log {
                format!("`{}` (the log, reference)", row.algorithm.name())
            } else {
                format!("`{}`", row.algorithm.name())
            };
            let against = |count: usize| {
                if log {
                    "-".to_string()
                } else {
                    format!("{} ({})", thousands(count), percent(count, total, 3))
                }
            };
            let (most, over) = match row.departures {
                Some(departures) => (
                    format!(
                        "{} by departure ({} by arrival)",
                        departures.most, row.overshoot.most
                    ),
                    format!("{} ({})", departures.keys_over, row.overshoot.keys_over),
                ),
                None => (
                    row.overshoot.most.to_string(),
                    row.overshoot.keys_over.to_string(),
                ),
            };
            let delays = row
                .delays
                .map(|(p50, p99, max)| {
                    format!(
                        "{p50} / {} / {}",
                        thousands(p99 as usize),
                        thousands(max as usize)
                    )
                })
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "| {name} | {} ({}) | {} | {} | {most} | {over} | {delays} | {:.1} | {} |",
                thousands(row.against.admitted),
                percent(row.against.admitted, total, 1),
                against(row.against.admitted_refused),
                against(row.against.refused_admitted),
                row.seconds,
                thousands(row.off_model.0),
            );
        }
        out.push('\n');
    }

    fn write_costs(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "| algorithm | bytes per key, {} per {} s | bytes per key, {} per {} s | Redis µs \
             per call, admitted | Redis µs per call, refused |",
            MEMORY_CASES[0].1,
            MEMORY_CASES[0].0 / 1000,
            thousands(MEMORY_CASES[1].1 as usize),
            MEMORY_CASES[1].0 / 1000,
        );
        out.push_str("|---|---:|---:|---:|---:|\n");
        for row in &self.rows {
            let memory = |case: usize| {
                let m = row.memory[case];
                if m.admitted == m.calls {
                    thousands(m.bytes as usize)
                } else {
                    format!(
                        "{} ({} of {} admitted)",
                        thousands(m.bytes as usize),
                        m.admitted,
                        m.calls
                    )
                }
            };
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {:.2} | {:.2} |",
                row.algorithm.name(),
                memory(0),
                memory(1),
                row.cpu[0],
                row.cpu[1]
            );
        }
        let _ = writeln!(out, "| PING | | | {:.2} | |\n", self.ping_us);
        let _ = writeln!(
            out,
            "Memory: `MEMORY USAGE key SAMPLES 0` of one key after its requests, spread evenly \
             over the window on the trace's clock. CPU: `usec_per_call` of `cmdstat_evalsha` \
             (`cmdstat_ping` for PING) after `CONFIG RESETSTAT` and {} calls on the Redis clock \
             (ARGV[1] = \"\"), median of {} runs; admitted: each call on a fresh key, {LIMIT} \
             per 60 s; refused: one full key, {LIMIT} per hour.{}\n",
            thousands(self.cpu_calls),
            self.cpu_runs,
            if self.foreign_calls == 0 {
                String::new()
            } else {
                format!(
                    " Another client of the same Redis made {} calls of the same command during \
                     the runs kept (a run is made again when it finds any, at most twice); \
                     they are in the figures.",
                    thousands(self.foreign_calls as usize)
                )
            }
        );
    }

    fn write_partings(&self, out: &mut String) {
        if self.partings.is_empty() {
            out.push_str(
                "Every script answered every request as its model (written from its header) \
                 does, delays included, and `token_bucket` and `gcra` decided every request \
                 alike.\n\n",
            );
            return;
        }
        out.push_str("**Answers that part** (each list's first parting request):\n\n");
        for p in &self.partings {
            let history: Vec<String> = p
                .history
                .iter()
                .map(|(i, at)| format!("#{i} at {at} ms"))
                .collect();
            let _ = writeln!(
                out,
                "- {}: {} requests differ; the first is request #{} of key {}, answered {} and \
                 {}; the key's requests up to it (ms since the trace's start): {}.",
                p.what,
                thousands(p.count),
                p.request,
                p.key,
                answer(p.answers.0),
                answer(p.answers.1),
                history.join(", ")
            );
        }
        out.push('\n');
    }

    fn write_discussion(&self, out: &mut String) {
        let total = self.trace.requests.len();
        let counter = self.row(Algorithm::SlidingWindowCounter);
        let wrong = counter.against.admitted_refused + counter.against.refused_admitted;
        let wrong_pct = 100.0 * wrong as f64 / total as f64;
        let e = &self.estimates;
        let mean = |sum: f64, n: usize| if n == 0 { 0.0 } else { 100.0 * sum / n as f64 };
        let times = wrong_pct / CLOUDFLARE_WRONG;
        let (near_keys, near_requests) = self.trace.in_band(Band::Near);
        let _ = writeln!(
            out,
            "**Discussion.** The counter (`sliding_window_counter`) decided {} of the {} \
             requests otherwise than the log: {:.3} % ({} admitted that the log refused, {} \
             refused that it admitted), {} Cloudflare's 0.003 % of 400 million requests decided \
             wrongly ([their post](https://blog.cloudflare.com/counting-things-a-lot-of-different-things/)). Its estimate (the previous window's count, weighted by the part of it \
             still inside the last 60 s, plus the current window's) was off the true count of \
             its own admissions in the last 60 s by {:.1} % on average over the {} requests that \
             found a count above 0, and by {:.1} % over the {} that found a key at 80 % of its \
             limit or more, against Cloudflare's average difference of {CLOUDFLARE_RATE_DIFFERENCE} \
             % between the real and the approximate rate. The traces differ: theirs was real \
             traffic seen by Cloudflare; ours is drawn to put {} of its requests on the {} \
             keys that run within 10 % of their limit, where a small error in the estimate \
             flips a decision, and to burst at window edges, against the counter's assumption \
             that the previous window's requests were spread evenly.",
            thousands(wrong),
            thousands(total),
            wrong_pct,
            thousands(counter.against.admitted_refused),
            thousands(counter.against.refused_admitted),
            if times >= 1.0 {
                format!("{} times", thousands(times.round() as usize))
            } else {
                format!("{times:.2} of")
            },
            mean(e.relative_error, e.requests),
            thousands(e.requests),
            mean(e.near_relative_error, e.near_requests),
            thousands(e.near_requests),
            percent(near_requests, total, 1),
            thousands(near_keys),
        );
        let fixed = self.row(Algorithm::FixedWindow);
        let log = self.row(Algorithm::SlidingWindow);
        let bucket = self.row(Algorithm::TokenBucket);
        let gcra = self.row(Algorithm::Gcra);
        let shaper = self.row(Algorithm::LeakyBucket);
        let departures = shaper.departures.unwrap_or_default();
        let (bursters, _) = self.trace.of_kind(Kind::Burster);
        let over = |row: &Row| row.overshoot.over_by_group;
        let _ = writeln!(
            out,
            "\nWhat `fixed_window`'s edge bursts cost: the {} edge bursters got up to {} \
             admissions within 60 s ({:.2} times the limit) where the log held them to {}, and \
             {} of them went over {LIMIT}. Over all keys, `fixed_window` let {} keys over {LIMIT} \
             ({} bursters; {} steady keys within 10 % of the limit, whose Poisson arrivals can \
             fill the end of one window and the start of the next; {} above it; {} below it) and \
             admitted {} requests the log refused ({}). The counter held the bursters to {} ({} \
             keys over {LIMIT} in all); the token bucket and GCRA, a full bucket and then its \
             refill, to {} and {} ({} and {} keys over); the shaper to {} by the time its \
             answers leave ({} by arrival, its queue being a window long; {} keys over by \
             departure), at a median delay of {} ms and a p99 of {} ms.\n",
            thousands(bursters),
            fixed.overshoot.most_by_group[0],
            fixed.overshoot.most_by_group[0] as f64 / LIMIT as f64,
            log.overshoot.most_by_group[0],
            thousands(over(fixed)[0]),
            thousands(fixed.overshoot.keys_over),
            thousands(over(fixed)[0]),
            thousands(over(fixed)[1]),
            thousands(over(fixed)[2]),
            thousands(over(fixed)[3]),
            thousands(fixed.against.admitted_refused),
            percent(fixed.against.admitted_refused, total, 3),
            counter.overshoot.most_by_group[0],
            thousands(counter.overshoot.keys_over),
            bucket.overshoot.most_by_group[0],
            gcra.overshoot.most_by_group[0],
            thousands(bucket.overshoot.keys_over),
            thousands(gcra.overshoot.keys_over),
            departures.most_by_group[0],
            shaper.overshoot.most_by_group[0],
            thousands(departures.keys_over),
            shaper.delays.unwrap_or_default().0,
            thousands(shaper.delays.unwrap_or_default().1 as usize),
        );
    }
}

fn answer(a: Answer) -> String {
    match a {
        None => "refused".into(),
        Some(0) => "admitted".into(),
        Some(delay) => format!("admitted with a delay of {delay} ms"),
    }
}

/// `1234567` as `1 234 567`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

fn percent(part: usize, whole: usize, decimals: usize) -> String {
    let p = if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    };
    format!("{p:.decimals$} %")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped_by_three() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1 000");
        assert_eq!(thousands(1_234_567), "1 234 567");
    }
}
