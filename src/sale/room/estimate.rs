//! How long a waiting shopper still waits, from the admission rate the room measured.
//!
//! The inlet's steps say how many places were admitted when. Over the last
//! [`WINDOW_SECS`] seconds, each second's admissions are one sample of the rate; the
//! 25th, 50th and 75th percentiles of those samples give three waits for the places
//! ahead (the fast rate the short wait, the slow one the long). Before the first
//! admission (the pre-queue, the sale's first instant) the configured `admitPerSecond`
//! stands in for every sample; from then on only what was measured counts, however
//! short (a room whose `maxActive` passes are all alive after its first second admits
//! nothing more, and must not promise the configured rate). A room that admitted
//! nothing over the whole window (sold out, or every pass alive) gives no estimate: a
//! number would be invented.

use super::step::Step;

/// Seconds of history the estimate looks at.
pub const WINDOW_SECS: i64 = 30;

/// Admissions per second: the quartiles of the last window's samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionRate {
    /// The 25th percentile of the per-second samples, in admissions per second: the long
    /// wait's rate.
    pub slow: f64,
    /// The median sample, in admissions per second.
    pub median: f64,
    /// The 75th percentile, in admissions per second: the short wait's rate.
    pub fast: f64,
}

impl AdmissionRate {
    /// From the steps (in order) as of `now_ms`; `None` before the first step (then the
    /// configured rate stands in: [`AdmissionRate::flat`]). Computed once per refresh of
    /// an instance's copy, not per poll (`lobby`).
    pub fn measured(steps: &[Step], now_ms: i64) -> Option<Self> {
        let since = now_ms - WINDOW_SECS * 1_000;
        let recent = &steps[steps.partition_point(|s| s.at_ms < since)..];
        let first = steps.first()?;
        // Seconds of history inside the window, the oldest one partly: from the first
        // step ever (or the window's start) to now.
        let start = first.at_ms.max(since);
        let seconds = ((now_ms - start).max(0) as u64)
            .div_ceil(1_000)
            .clamp(1, WINDOW_SECS as u64) as usize;

        let mut samples = vec![0u64; seconds];
        for step in recent {
            let slot = ((now_ms - step.at_ms) / 1_000) as usize;
            if let Some(sample) = samples.get_mut(slot) {
                *sample += step.admitted();
            }
        }
        samples.sort_unstable();
        // Nearest rank, rounded half up.
        let quartile = |q: usize| samples[((samples.len() - 1) * q + 2) / 4] as f64;
        Some(Self {
            slow: quartile(1),
            median: quartile(2),
            fast: quartile(3),
        })
    }

    /// The same rate for all three: the configured one, before any admission.
    pub fn flat(rate: f64) -> Self {
        Self {
            slow: rate,
            median: rate,
            fast: rate,
        }
    }
}

/// Seconds to wait for `ahead` places: (short, median, long), `None` without a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitEstimate {
    /// The short wait, in seconds, from the fast rate.
    pub p25: Option<u64>,
    /// The median wait, in seconds.
    pub p50: Option<u64>,
    /// The long wait, in seconds, from the slow rate.
    pub p75: Option<u64>,
}

impl WaitEstimate {
    /// `ahead` places at `rate`, plus `until_open` seconds before admission starts.
    pub fn new(ahead: u64, rate: AdmissionRate, until_open: u64) -> Self {
        let wait = |per_second: f64| {
            (per_second > 0.0).then(|| (ahead as f64 / per_second).ceil() as u64 + until_open)
        };
        Self {
            p25: wait(rate.fast),
            p50: wait(rate.median),
            p75: wait(rate.slow),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(at_ms: i64, admitted: u64) -> Step {
        Step {
            from: 0,
            to: admitted,
            at_ms,
            skipped: Vec::new(),
        }
    }

    #[test]
    fn without_history_the_configured_rate_stands_in() {
        let rate = AdmissionRate::measured(&[], 0).unwrap_or(AdmissionRate::flat(50.0));
        assert_eq!(
            rate,
            AdmissionRate {
                slow: 50.0,
                median: 50.0,
                fast: 50.0
            }
        );
        assert_eq!(
            WaitEstimate::new(100, rate, 3),
            WaitEstimate {
                p25: Some(5),
                p50: Some(5),
                p75: Some(5)
            }
        );
    }

    #[test]
    fn the_quartiles_of_each_seconds_admissions_make_the_range() {
        // Ten seconds: admissions 10, 20, ..., 100 (one step per second).
        let now = 100_000;
        let steps: Vec<Step> = (0..10)
            .map(|s| step(now - 10_000 + s * 1_000 + 1, 10 * (s as u64 + 1)))
            .collect();
        let rate = AdmissionRate::measured(&steps, now).unwrap();
        assert_eq!((rate.slow, rate.median, rate.fast), (30.0, 60.0, 80.0));
        let wait = WaitEstimate::new(700, rate, 0);
        assert_eq!(
            (wait.p25, wait.p50, wait.p75),
            (Some(9), Some(12), Some(24))
        );
    }

    #[test]
    fn after_the_first_admission_only_what_was_measured_counts() {
        // Two admitted in the first of two seconds, then nothing (every pass alive).
        let now = 100_000;
        let rate = AdmissionRate::measured(&[step(now - 1_500, 2)], now).unwrap();
        assert_eq!((rate.slow, rate.fast), (0.0, 2.0));
    }

    #[test]
    fn a_room_that_admits_nothing_gives_no_estimate() {
        let now = 100_000;
        let steps = vec![step(now - 29_000, 0)];
        let rate = AdmissionRate::measured(&steps, now).unwrap();
        assert_eq!(WaitEstimate::new(10, rate, 0).p50, None);
    }
}
