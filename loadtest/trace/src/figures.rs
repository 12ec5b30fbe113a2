//! The figures of the replayed answers, computed offline: agreement with the log,
//! overshoot, the shaper's delays, and where two lists of answers part.

use crate::calls::Answer;
use crate::workload::{Band, Trace};

/// One algorithm's answers against the log's.
#[derive(Debug, Clone, Copy, Default)]
pub struct Against {
    pub admitted: usize,
    /// It admitted a request the log refused...
    pub admitted_refused: usize,
    /// ...and the reverse.
    pub refused_admitted: usize,
}

pub fn against(log: &[Answer], other: &[Answer]) -> Against {
    let mut figures = Against::default();
    for (l, o) in log.iter().zip(other) {
        figures.admitted += usize::from(o.is_some());
        match (l, o) {
            (None, Some(_)) => figures.admitted_refused += 1,
            (Some(_), None) => figures.refused_admitted += 1,
            _ => {}
        }
    }
    figures
}

/// The most admissions of one key inside any window of `window_ms` (the log's window:
/// the `window_ms` ending at and including an instant), and how many keys went over
/// `limit`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Overshoot {
    pub most: usize,
    pub keys_over: usize,
    /// The same by group of keys: the edge bursters, then the steady keys within 10 % of
    /// the limit, above it, below it.
    pub most_by_group: [usize; 4],
    pub over_by_group: [usize; 4],
}

/// `by_departure`: count each admission at its arrival plus the delay it was given (the
/// shaper's answer leaves then), instead of at its arrival.
pub fn overshoot(
    trace: &Trace,
    answers: &[Answer],
    by_departure: bool,
    window_ms: i64,
    limit: usize,
) -> Overshoot {
    let mut times = vec![Vec::new(); trace.keys.len()];
    for (request, answer) in trace.requests.iter().zip(answers) {
        if let Some(delay) = answer {
            let delay = if by_departure { i64::from(*delay) } else { 0 };
            times[request.key as usize].push(request.at_ms + delay);
        }
    }
    let mut figures = Overshoot::default();
    for (key, at) in times.iter_mut().enumerate() {
        at.sort_unstable();
        let (mut first, mut most) = (0, 0);
        for last in 0..at.len() {
            while at[first] <= at[last] - window_ms {
                first += 1;
            }
            most = most.max(last - first + 1);
        }
        figures.keys_over += usize::from(most > limit);
        let group = match trace.steady_band(key) {
            None => 0,
            Some(Band::Near) => 1,
            Some(Band::Above) => 2,
            Some(Band::Below) => 3,
        };
        figures.most_by_group[group] = figures.most_by_group[group].max(most);
        figures.over_by_group[group] += usize::from(most > limit);
        figures.most = figures.most.max(most);
    }
    figures
}

/// The median, 99th percentile and greatest delay of the admitted requests (ms).
pub fn delays(answers: &[Answer]) -> (u32, u32, u32) {
    let mut delays: Vec<u32> = answers.iter().flatten().copied().collect();
    if delays.is_empty() {
        return (0, 0, 0);
    }
    delays.sort_unstable();
    let at = |q: f64| delays[((delays.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), delays[delays.len() - 1])
}

/// How many requests two lists of answers decide differently (with `delays`, a
/// different delay counts too), and the first of them.
pub fn parting(a: &[Answer], b: &[Answer], delays: bool) -> (usize, Option<usize>) {
    let differ = |x: &Answer, y: &Answer| {
        if delays {
            x != y
        } else {
            x.is_some() != y.is_some()
        }
    };
    let mut first = None;
    let mut count = 0;
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if differ(x, y) {
            count += 1;
            first.get_or_insert(i);
        }
    }
    (count, first)
}

/// Request `index`'s key, and the key's requests up to it (at most the last `last`):
/// (index in the trace, ms since the trace's start).
pub fn history(trace: &Trace, index: usize, last: usize) -> (u32, Vec<(usize, i64)>) {
    let key = trace.requests[index].key;
    let mut seen: Vec<(usize, i64)> = trace.requests[..=index]
        .iter()
        .enumerate()
        .filter(|(_, r)| r.key == key)
        .map(|(i, r)| (i, r.at_ms - trace.start_ms))
        .collect();
    let skip = seen.len().saturating_sub(last);
    seen.drain(..skip);
    (key, seen)
}
