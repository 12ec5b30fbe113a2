//! The concurrency limit that follows latency: Netflix concurrency-limits' Gradient2,
//! with a latency floor for a batching committer.
//!
//! Purchases' latencies (from the admission to the commit's answer) are averaged over a
//! sample window. At the end of each window, with `short` the window's mean and `long`
//! an exponential average of past windows (the baseline):
//!
//! ```text
//! gradient = clamp(max(tolerance × long, floor) / short, 0.5, 1)
//! gradient < 1:  limit ← (1 − smoothing) × limit + smoothing × (gradient × limit + √limit)
//! gradient = 1:  limit ← limit + √limit
//! limit ← clamp(limit, min, max)
//! ```
//!
//! A window slower than its tolerated latency means requests queue: the limit falls, by
//! at most half of the smoothing per window (Gradient2's smoothed decrease). A window
//! within it means no queueing: the limit grows by its square root (Envoy's headroom),
//! unsmoothed, so that it is back within seconds once the commit path is fast again.
//!
//! Two departures from Gradient2, both for group commit, whose latency rises with the
//! load by design (a batch waits for the one before it):
//! - **the floor**: a window whose mean is under `floor` never lowers the limit, however
//!   fast the baseline was. Without it, a stampede after a quiet minute (baseline 1 ms,
//!   batches then 5–20 ms) would read as queueing and shed a healthy sale;
//! - **no "app-limited" freeze**: Gradient2 leaves the limit alone while fewer than half
//!   of it are in flight. Here the limit may grow back whenever latency is healthy, so a
//!   slowdown at night does not leave tomorrow's sale with a limit it cannot regrow in
//!   time (the limit is bounded by `max` anyway).
//!
//! The baseline forgets slowly ([`LONG_WINDOWS`] windows), so a slowdown that lasts is
//! at first shed as queueing, then accepted as the new normal; when latency returns
//! below half the baseline, the baseline is pulled down by 5 % a window (Gradient2's
//! recovery rule), so a later slowdown is noticed again.
//!
//! No clock is read here: every sample carries its instant, so tests replay time.

use std::time::Duration;

use tokio::time::Instant;

/// A window closes at its first sample once it has lasted `window` and holds at least
/// this many samples: a mean of one or two purchases says little.
pub const MIN_SAMPLES: u32 = 10;

/// The baseline's memory, in windows: each window moves it by 1/`LONG_WINDOWS` of the
/// difference (about 10 s of a busy sale at 100 ms windows).
pub const LONG_WINDOWS: f64 = 100.0;

/// The limit's bounds and how it moves (settings `shedding_*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradientSettings {
    /// The limit at start-up.
    pub initial: u32,
    /// The limit never falls below this: what a slow Postgres is still offered.
    pub min: u32,
    /// Nor rises above this.
    pub max: u32,
    /// How much of each window's verdict a decrease takes (Gradient2's smoothing).
    pub smoothing: f64,
    /// How much slower than the baseline a window may be before it counts as queueing.
    pub tolerance: f64,
    /// A window whose mean latency is under this never lowers the limit.
    pub floor: Duration,
    /// The shortest sample window.
    pub window: Duration,
}

impl GradientSettings {
    /// Refuses bounds and factors the formula cannot work with; the error names the
    /// setting.
    pub fn check(&self) -> Result<(), String> {
        if self.min == 0 {
            return Err("shedding_min_limit must be at least 1".into());
        }
        if !(self.min <= self.initial && self.initial <= self.max) {
            return Err(format!(
                "shedding_initial_limit ({}) must lie between shedding_min_limit ({}) and \
                 shedding_max_limit ({})",
                self.initial, self.min, self.max
            ));
        }
        if !(self.smoothing > 0.0 && self.smoothing <= 1.0) {
            return Err("shedding_smoothing must be in (0, 1]".into());
        }
        if !(self.tolerance >= 1.0 && self.tolerance.is_finite()) {
            return Err("shedding_tolerance must be at least 1".into());
        }
        if self.window.is_zero() {
            return Err("shedding_window_ms must be positive".into());
        }
        Ok(())
    }
}

/// The limit and what it is computed from. Not shared: the caller holds it behind a lock
/// (see [`super::shedding`]).
#[derive(Debug)]
pub struct Gradient {
    settings: GradientSettings,
    limit: f64,
    /// The baseline, in seconds; `None` until the first window closes.
    long: Option<f64>,
    window_start: Instant,
    window_sum: f64,
    window_samples: u32,
}

impl Gradient {
    /// A limit at its start value, its first window opening at `now`.
    pub fn new(settings: GradientSettings, now: Instant) -> Self {
        Self {
            settings,
            limit: f64::from(settings.initial),
            long: None,
            window_start: now,
            window_sum: 0.0,
            window_samples: 0,
        }
    }

    /// The limit now, whole.
    pub fn limit(&self) -> u32 {
        self.limit as u32
    }

    /// Records one purchase's latency, measured at `now`. When this sample closes a
    /// window, answers the limit it computed.
    pub fn sample(&mut self, latency: Duration, now: Instant) -> Option<u32> {
        self.window_sum += latency.as_secs_f64();
        self.window_samples += 1;
        if self.window_samples < MIN_SAMPLES
            || now.saturating_duration_since(self.window_start) < self.settings.window
        {
            return None;
        }
        let short = self.window_sum / f64::from(self.window_samples);
        self.window_start = now;
        self.window_sum = 0.0;
        self.window_samples = 0;
        self.update(short);
        Some(self.limit())
    }

    /// One window's verdict (see the module docs).
    fn update(&mut self, short: f64) {
        let GradientSettings {
            min,
            max,
            smoothing,
            tolerance,
            floor,
            ..
        } = self.settings;
        let long = match self.long {
            None => short,
            Some(long) => long + (short - long) / LONG_WINDOWS,
        };
        // Latency is back well under the baseline: the baseline learned a slowdown that
        // is over, and would hide the next one.
        self.long = Some(if short > 0.0 && long / short > 2.0 {
            long * 0.95
        } else {
            long
        });
        let tolerated = (tolerance * long).max(floor.as_secs_f64());
        let gradient = if short > 0.0 {
            (tolerated / short).clamp(0.5, 1.0)
        } else {
            1.0
        };
        let limit = self.limit;
        let next = if gradient < 1.0 {
            (1.0 - smoothing) * limit + smoothing * (gradient * limit + limit.sqrt())
        } else {
            limit + limit.sqrt()
        };
        self.limit = next.clamp(f64::from(min), f64::from(max));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> GradientSettings {
        GradientSettings {
            initial: 1000,
            min: 20,
            max: 1000,
            smoothing: 0.2,
            tolerance: 1.5,
            floor: Duration::from_millis(50),
            window: Duration::from_millis(100),
        }
    }

    /// Feeds one window of `MIN_SAMPLES` samples of `latency` starting at `*now`,
    /// spread over the window; answers the limit the window closed with.
    fn window(gradient: &mut Gradient, now: &mut Instant, latency: Duration) -> u32 {
        let step = settings().window / MIN_SAMPLES;
        let mut closed = None;
        for _ in 0..MIN_SAMPLES {
            *now += step;
            closed = gradient.sample(latency, *now);
        }
        closed.expect("the window closes at its tenth sample, a window's length later")
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_window_closes_only_after_its_length_and_its_samples() {
        let start = Instant::now();
        let mut gradient = Gradient::new(settings(), start);
        // Ten samples at once: too early.
        for _ in 0..MIN_SAMPLES {
            assert_eq!(gradient.sample(ms(400), start), None);
        }
        // Later, the eleventh closes it, with all eleven in its mean.
        assert_eq!(gradient.sample(ms(400), start + ms(100)), Some(1000));
        // A window's length with too few samples does not close the next one.
        assert_eq!(gradient.sample(ms(400), start + ms(500)), None);
    }

    #[test]
    fn healthy_latency_never_lowers_the_limit_even_far_above_the_baseline() {
        let mut now = Instant::now();
        let mut gradient = Gradient::new(settings(), now);
        // A quiet baseline of 1 ms, then a stampede's batches at 40 ms (40 × the
        // baseline, under the 50 ms floor) for a minute.
        for _ in 0..50 {
            assert_eq!(window(&mut gradient, &mut now, ms(1)), 1000);
        }
        for _ in 0..600 {
            assert_eq!(window(&mut gradient, &mut now, ms(40)), 1000);
        }
    }

    #[test]
    fn a_slow_commit_path_lowers_the_limit_to_its_floor_within_seconds() {
        let mut now = Instant::now();
        let mut gradient = Gradient::new(settings(), now);
        for _ in 0..10 {
            window(&mut gradient, &mut now, ms(3));
        }
        // Commits at 250 ms: the gradient is clamped at 0.5, each window takes about a
        // tenth off the limit.
        let first = window(&mut gradient, &mut now, ms(250));
        assert_eq!(first, 906, "0.8 × 1000 + 0.2 × (0.5 × 1000 + √1000)");
        let mut windows = 1;
        while gradient.limit() > 20 {
            window(&mut gradient, &mut now, ms(250));
            windows += 1;
        }
        // Halved in about 0.7 s, at the minimum after about 5 s of 100 ms windows.
        assert_eq!(windows, 49);
        assert_eq!(gradient.limit(), 20);
    }

    #[test]
    fn the_limit_grows_back_by_its_square_root_once_latency_is_healthy() {
        let mut now = Instant::now();
        let mut gradient = Gradient::new(settings(), now);
        window(&mut gradient, &mut now, ms(3));
        while gradient.limit() > 20 {
            window(&mut gradient, &mut now, ms(250));
        }
        let mut limits = Vec::new();
        while gradient.limit() < 1000 {
            limits.push(window(&mut gradient, &mut now, ms(3)));
        }
        assert_eq!(&limits[..4], &[24, 29, 35, 41], "20 + √20, then on");
        // From the minimum back to the maximum in under 6 s of busy windows (shedding
        // stops long before: a healthy commit path needs few purchases in flight).
        assert_eq!(limits.len(), 56);
    }

    #[test]
    fn a_slowdown_that_lasts_becomes_the_baseline_and_the_limit_recovers() {
        let mut now = Instant::now();
        let mut gradient = Gradient::new(settings(), now);
        window(&mut gradient, &mut now, ms(3));
        let mut lowest = u32::MAX;
        for _ in 0..400 {
            lowest = lowest.min(window(&mut gradient, &mut now, ms(250)));
        }
        assert_eq!(lowest, 20, "first shed as queueing");
        assert_eq!(gradient.limit(), 1000, "then accepted as the new normal");
        // When commits are fast again, the baseline comes down fast, so a second
        // slowdown is noticed again.
        for _ in 0..100 {
            window(&mut gradient, &mut now, ms(3));
        }
        assert!(window(&mut gradient, &mut now, ms(250)) < 1000);
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let mut now = Instant::now();
        let bounded = GradientSettings {
            initial: 50,
            min: 20,
            max: 60,
            ..settings()
        };
        let mut gradient = Gradient::new(bounded, now);
        for _ in 0..20 {
            window(&mut gradient, &mut now, ms(1));
        }
        assert_eq!(gradient.limit(), 60);
        for _ in 0..40 {
            window(&mut gradient, &mut now, Duration::from_secs(5));
        }
        assert_eq!(gradient.limit(), 20);
    }

    #[test]
    fn settings_the_formula_cannot_use_are_refused_by_name() {
        let refused = |s: GradientSettings| s.check().unwrap_err();
        assert!(refused(GradientSettings {
            min: 0,
            ..settings()
        })
        .contains("shedding_min_limit"));
        assert!(refused(GradientSettings {
            initial: 2000,
            ..settings()
        })
        .contains("shedding_initial_limit"));
        assert!(refused(GradientSettings {
            smoothing: 0.0,
            ..settings()
        })
        .contains("shedding_smoothing"));
        assert!(refused(GradientSettings {
            tolerance: 0.5,
            ..settings()
        })
        .contains("shedding_tolerance"));
        assert_eq!(settings().check(), Ok(()));
    }
}
