//! The trace through one algorithm's script in Redis, in trace order, each request at
//! its own time (ARGV[1] = the trace's clock), pipelined in batches.
//!
//! A pipeline keeps order and the time is the trace's, so the decisions are the ones the
//! script makes at those times, however fast the replay runs, but for one thing: the
//! keys' TTLs run on the Redis clock. Replayed faster than the trace, a key lives longer
//! in trace time than it must, which changes nothing (every script ignores stale
//! state). A key could only die too soon if more time passed on the Redis clock than on
//! the trace's between two of its requests, which a stall between two batches can do;
//! only the fixed window's keys may live less than a stall (to the end of their window;
//! the others at least an interval, 600 ms here), so a batch is never cut within
//! `EDGE_GUARD_MS` before a window edge. The reference models (`model`) would show any
//! decision that changed.

use std::ops::Range;
use std::time::Instant;

use anyhow::Context;
use redis::aio::MultiplexedConnection;

use crate::algorithm::Algorithm;
use crate::calls::{self, Answer, Namespace};
use crate::workload::{Trace, LIMIT, WINDOW_MS};

/// No batch ends within this many ms before a window edge.
const EDGE_GUARD_MS: i64 = 3_000;

pub struct Replayed {
    pub answers: Vec<Answer>,
    pub seconds: f64,
}

/// Where the trace is cut into pipelines: after at least `size` requests, never within
/// `EDGE_GUARD_MS` before a window edge.
pub fn batches(trace: &Trace, size: usize) -> Vec<Range<usize>> {
    let mut cuts = Vec::new();
    let mut from = 0;
    let requests = &trace.requests;
    for (i, request) in requests.iter().enumerate().skip(1) {
        let to_edge = WINDOW_MS - request.at_ms.rem_euclid(WINDOW_MS);
        if i - from >= size && to_edge > EDGE_GUARD_MS {
            cuts.push(from..i);
            from = i;
        }
    }
    cuts.push(from..requests.len());
    cuts
}

pub async fn replay(
    conn: &mut MultiplexedConnection,
    sha: &str,
    algorithm: Algorithm,
    trace: &Trace,
    batches: &[Range<usize>],
    keys: &Namespace,
) -> anyhow::Result<Replayed> {
    let params = algorithm.params(WINDOW_MS, LIMIT);
    let build = |range: Range<usize>| {
        let mut pipe = redis::pipe();
        for i in range {
            let request = trace.requests[i];
            let key = keys.key(request.key);
            calls::push(
                &mut pipe,
                sha,
                &key,
                Some(request.at_ms),
                &keys.member(i),
                &params,
            );
        }
        pipe
    };
    let started = Instant::now();
    let mut answers = Vec::with_capacity(trace.requests.len());
    let mut next = batches.first().map(|range| build(range.clone()));
    let mut following = batches.iter().skip(1);
    while let Some(pipe) = next.take() {
        // The next pipeline is built while Redis runs this one.
        let (replies, built) = tokio::join!(pipe.query_async::<Vec<Vec<i64>>>(conn), async {
            following.next().map(|range| build(range.clone()))
        });
        let replies = replies.with_context(|| format!("replaying {}", algorithm.name()))?;
        for reply in &replies {
            answers.push(calls::answer(reply)?);
        }
        next = built;
    }
    anyhow::ensure!(
        answers.len() == trace.requests.len(),
        "{}: {} answers to {} requests",
        algorithm.name(),
        answers.len(),
        trace.requests.len()
    );
    Ok(Replayed {
        answers,
        seconds: started.elapsed().as_secs_f64(),
    })
}
