//! The limiter's clock: Redis's `TIME` by default, this process's for Redis services that
//! refuse `TIME` in scripts, or a manual one the tests move.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Where the scripts get "now" from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockSource {
    /// Redis `TIME` inside the script: every instance agrees, whatever its own clock.
    Redis,
    /// The app's clock, passed in ARGV: for managed Redis services that refuse `TIME`
    /// in scripts. Skewed instances then disagree at window edges.
    App,
}

/// Where the scripts take "now" from. See [`ClockSource`] for the trade-off.
#[derive(Debug, Clone)]
pub enum Clock {
    /// Redis `TIME`, read inside the script.
    Redis,
    /// This process's wall clock.
    System,
    /// A clock that moves only when told to: lets tests freeze and jump time.
    Manual(ManualClock),
}

impl Clock {
    /// The clock a setting names: Redis's `TIME`, or this process's wall clock.
    pub fn from_source(source: ClockSource) -> Self {
        match source {
            ClockSource::Redis => Self::Redis,
            ClockSource::App => Self::System,
        }
    }

    /// Microseconds since `epoch` on this instance, for deadlines kept in memory (the
    /// denial cache): monotonic, except that a manual clock is followed exactly, so
    /// tests that move time move those deadlines too.
    pub fn local_us(&self, epoch: std::time::Instant) -> i64 {
        match self {
            Self::Manual(manual) => manual.now_ms().saturating_mul(1000),
            Self::Redis | Self::System => {
                i64::try_from(epoch.elapsed().as_micros()).unwrap_or(i64::MAX)
            }
        }
    }

    /// Waits until `local_us` (on [`Self::local_us`]'s scale): the shaper's departure
    /// slot. A manual clock does not wait: its tests move time themselves.
    pub async fn hold_until(&self, epoch: std::time::Instant, local_us: i64) {
        if matches!(self, Self::Manual(_)) {
            return;
        }
        let hold = local_us.saturating_sub(self.local_us(epoch));
        if hold > 0 {
            tokio::time::sleep(std::time::Duration::from_micros(hold as u64)).await;
        }
    }

    /// The timestamp to pass to a script (`None` for the Redis clock), and how many µs
    /// past that millisecond it really is: the script's waits count from the
    /// millisecond, so they end that much sooner than they read.
    pub fn script_now(&self) -> (Option<i64>, i64) {
        match self {
            Self::Redis => (None, 0),
            Self::System => {
                let us = chrono::Utc::now().timestamp_micros();
                (Some(us.div_euclid(1000)), us.rem_euclid(1000))
            }
            Self::Manual(manual) => (Some(manual.now_ms()), 0),
        }
    }
}

/// A clock tests move by hand, shared by every clone.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock at `ms` since the epoch.
    pub fn starting_at(ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(ms)))
    }

    /// Now, in milliseconds since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Moves the clock forward by `ms` (backward if negative).
    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}
