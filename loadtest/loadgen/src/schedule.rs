//! The load itself. The closed model keeps a number of requests in flight, each worker
//! sending its next request when the last one is answered. The open model sends at a
//! rate, whatever the answers take; it drops a send only when `max_in_flight` requests
//! are outstanding.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use crate::config::Load;
use crate::request::Shared;

/// Sends requests `0, 1, …` until `max` were sent or `deadline` passed, counting each
/// answered one in `done`. Returns how many sends the open model dropped.
pub(crate) async fn drive(
    shared: &Arc<Shared>,
    load: &Load,
    max: u64,
    deadline: Instant,
    max_in_flight: Option<usize>,
    done: &Arc<AtomicU64>,
) -> anyhow::Result<u64> {
    match *load {
        Load::Concurrency(workers) => {
            closed(shared, workers, max, deadline, done).await?;
            Ok(0)
        }
        Load::Rate(per_sec) => open(shared, per_sec, max, deadline, max_in_flight, done).await,
    }
}

/// `workers` requests in flight at all times.
async fn closed(
    shared: &Arc<Shared>,
    workers: usize,
    max: u64,
    deadline: Instant,
    done: &Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let sequence = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..workers.max(1))
        .map(|_| {
            let (shared, sequence, done) =
                (Arc::clone(shared), Arc::clone(&sequence), Arc::clone(done));
            tokio::spawn(async move {
                loop {
                    let n = sequence.fetch_add(1, Ordering::Relaxed);
                    if n >= max || Instant::now() >= deadline {
                        break;
                    }
                    shared.fire(n).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await?;
    }
    Ok(())
}

/// `per_sec` sends a second, at most `max_in_flight` outstanding; returns the sends
/// dropped for that cap.
async fn open(
    shared: &Arc<Shared>,
    per_sec: f64,
    max: u64,
    deadline: Instant,
    max_in_flight: Option<usize>,
    done: &Arc<AtomicU64>,
) -> anyhow::Result<u64> {
    anyhow::ensure!(per_sec > 0.0, "rate must be positive");
    let interval = Duration::from_secs_f64(1.0 / per_sec);
    let mut in_flight = futures_util::stream::FuturesUnordered::new();
    let mut next = Instant::now();
    let mut n = 0;
    let mut dropped = 0;
    let cap = max_in_flight.unwrap_or(usize::MAX);
    while n < max && Instant::now() < deadline {
        // Catch up on every send that is due, then wait for the next one while
        // collecting answers: the send schedule never waits for answers.
        while next <= Instant::now() && n < max {
            if in_flight.len() < cap {
                let shared = Arc::clone(shared);
                in_flight.push(tokio::spawn(async move { shared.fire(n).await }));
            } else {
                dropped += 1;
            }
            n += 1;
            next += interval;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            Some(_) = in_flight.next() => { done.fetch_add(1, Ordering::Relaxed); }
        }
    }
    while in_flight.next().await.is_some() {
        done.fetch_add(1, Ordering::Relaxed);
    }
    Ok(dropped)
}
