//! The line on stderr, once a second while the load runs: time, requests done, and
//! the answers so far by status.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use loadtest_core::ledger::Record;

/// Prints the line every second from one second after `start` until aborted.
pub(crate) fn spawn(
    ledger: Arc<Mutex<Vec<Record>>>,
    done: Arc<AtomicU64>,
    start: Instant,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        loop {
            tick.tick().await;
            let records = ledger.lock().map(|l| summary_line(&l)).unwrap_or_default();
            eprint!(
                "\r[{:>4.0}s] done {:>8}  {records}   ",
                start.elapsed().as_secs_f64(),
                done.load(Ordering::Relaxed)
            );
        }
    })
}

fn summary_line(records: &[Record]) -> String {
    let mut counts: BTreeMap<u16, u64> = BTreeMap::new();
    for r in records {
        *counts.entry(r.status).or_default() += 1;
    }
    counts
        .iter()
        .map(|(s, c)| format!("{s}:{c}"))
        .collect::<Vec<_>>()
        .join(" ")
}
