use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use super::policy::ClockSource;

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
    pub fn from_source(source: ClockSource) -> Self {
        match source {
            ClockSource::Redis => Self::Redis,
            ClockSource::App => Self::System,
        }
    }

    /// Milliseconds since `epoch` on this instance, for deadlines kept in memory (the
    /// denial cache): monotonic, except that a manual clock is followed exactly, so
    /// tests that move time move those deadlines too.
    pub fn local_ms(&self, epoch: std::time::Instant) -> i64 {
        match self {
            Self::Manual(manual) => manual.now_ms(),
            Self::Redis | Self::System => {
                i64::try_from(epoch.elapsed().as_millis()).unwrap_or(i64::MAX)
            }
        }
    }

    /// The timestamp to pass to a script, or `None` for the Redis clock.
    pub fn now_ms(&self) -> Option<i64> {
        match self {
            Self::Redis => None,
            Self::System => Some(chrono::Utc::now().timestamp_millis()),
            Self::Manual(manual) => Some(manual.now_ms()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn starting_at(ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(ms)))
    }

    pub fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    pub fn advance_ms(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}
