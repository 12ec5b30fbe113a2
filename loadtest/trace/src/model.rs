//! Reference models: each algorithm's decision for one enforced rule, no shadow rule and
//! no rule edit, written from its script's header in plain integers, run over the trace
//! offline. Where a script's answer differs from its model's, either the replay was not
//! exact (a key died too soon, see `replay`) or the script does not do what its header
//! says: the report names the first such request.
//!
//! The sliding-window counter's model also measures how far its estimate is from the
//! count it estimates (its own admissions in the last window), Cloudflare's "difference
//! between real rate and approximate rate".

use std::collections::VecDeque;

use crate::algorithm::Algorithm;
use crate::calls::Answer;
use crate::workload::Trace;

/// How far the counter's estimate was from the true count, over the requests that
/// found a true count above 0.
#[derive(Debug, Clone, Copy, Default)]
pub struct Estimates {
    pub requests: usize,
    /// Sum of |estimate - true| / true.
    pub relative_error: f64,
    /// The same over the requests whose true count was at least 80 % of the limit.
    pub near_requests: usize,
    pub near_relative_error: f64,
}

/// The model's answers to the trace for `algorithm` with a rule of `threshold` per
/// `window` ms (the parameters `Algorithm::params` gives the script).
pub fn answers(
    algorithm: Algorithm,
    trace: &Trace,
    window: i64,
    threshold: i64,
) -> (Vec<Answer>, Estimates) {
    let keys = trace.keys.len();
    let mut estimates = Estimates::default();
    let mut decide: Box<dyn FnMut(usize, i64) -> Answer + '_> = match algorithm {
        Algorithm::SlidingWindow => {
            let mut logs = vec![VecDeque::<i64>::new(); keys];
            Box::new(move |key, now| {
                let log = &mut logs[key];
                while log.front().is_some_and(|&t| t <= now - window) {
                    log.pop_front();
                }
                admit_if((log.len() as i64) < threshold, || log.push_back(now))
            })
        }
        Algorithm::FixedWindow => {
            let mut counts = vec![(i64::MIN, 0i64); keys];
            Box::new(move |key, now| {
                let aligned = now - now.rem_euclid(window);
                let (start, count) = &mut counts[key];
                if *start < aligned {
                    (*start, *count) = (aligned, 0);
                }
                admit_if(*count < threshold, || *count += 1)
            })
        }
        Algorithm::SlidingWindowCounter => {
            // (start, cur, prev), and the key's own admissions for the true count.
            let mut counts = vec![(i64::MIN, 0i64, 0i64); keys];
            let mut admitted = vec![VecDeque::<i64>::new(); keys];
            let estimates = &mut estimates;
            Box::new(move |key, now| {
                let aligned = now - now.rem_euclid(window);
                let (start, cur, prev) = &mut counts[key];
                if *start < aligned {
                    let last = if *start == aligned - window { *cur } else { 0 };
                    (*start, *cur, *prev) = (aligned, 0, last);
                }
                let elapsed = (now - *start).max(0);
                let log = &mut admitted[key];
                while log.front().is_some_and(|&t| t <= now - window) {
                    log.pop_front();
                }
                if !log.is_empty() {
                    let truth = log.len() as f64;
                    let estimate =
                        (*prev * (window - elapsed)) as f64 / window as f64 + *cur as f64;
                    let error = (estimate - truth).abs() / truth;
                    estimates.requests += 1;
                    estimates.relative_error += error;
                    if truth * 5.0 >= threshold as f64 * 4.0 {
                        estimates.near_requests += 1;
                        estimates.near_relative_error += error;
                    }
                }
                let room = threshold * window - *prev * (window - elapsed) - (*cur + 1) * window;
                admit_if(room >= 0, || {
                    *cur += 1;
                    log.push_back(now);
                })
            })
        }
        Algorithm::TokenBucket => {
            // Tokens scaled by the refill period: one token = `window` units, each ms
            // adds `threshold` units (capacity = refill = threshold per window).
            let full = threshold * window;
            let mut buckets: Vec<Option<(i64, i64)>> = vec![None; keys];
            Box::new(move |key, now| {
                let (mut level, mut at) = buckets[key].unwrap_or((full, now));
                if now > at {
                    level = (level + (now - at) * threshold).min(full);
                    at = now;
                }
                admit_if(level >= window, || {
                    buckets[key] = Some((level - window, at))
                })
            })
        }
        Algorithm::Gcra => {
            // The theoretical arrival time in units of 1/threshold ms.
            let mut tats: Vec<Option<i64>> = vec![None; keys];
            Box::new(move |key, now| {
                let debt = tats[key].map_or(0, |tat| (tat - now * threshold).max(0));
                admit_if(debt <= (threshold - 1) * window, || {
                    tats[key] = Some(now * threshold + debt + window)
                })
            })
        }
        Algorithm::LeakyBucket => {
            // The last departure slot in units of 1/threshold ms; max delay = window.
            let bound = window * threshold;
            let mut slots: Vec<Option<i64>> = vec![None; keys];
            Box::new(move |key, now| {
                let slot = slots[key].map_or(0, |last| (last - now * threshold + window).max(0));
                if slot > bound {
                    return None;
                }
                slots[key] = Some(now * threshold + slot);
                Some(((slot + threshold - 1) / threshold) as u32)
            })
        }
    };
    let answers = trace
        .requests
        .iter()
        .map(|r| decide(r.key as usize, r.at_ms))
        .collect();
    drop(decide);
    (answers, estimates)
}

fn admit_if(admit: bool, record: impl FnOnce()) -> Answer {
    if admit {
        record();
        Some(0)
    } else {
        None
    }
}
