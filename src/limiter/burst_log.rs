//! One warning per burst of limiter failures, not one per request.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Logs a burst of limiter failures once, then at most every 10 s with the number
/// suppressed: during an outage every request fails (open or closed), and a line per
/// request would bury the log (and the disk) exactly when someone needs to read it.
pub(crate) struct BurstLog {
    /// What the failures mean for requests, e.g. "failing open".
    outcome: &'static str,
    last_logged_ms: AtomicI64,
    suppressed: AtomicU64,
}

impl BurstLog {
    const QUIET_MS: i64 = 10_000;

    pub(crate) fn new(outcome: &'static str) -> Self {
        Self {
            outcome,
            // Far enough in the past that the first failure is logged at once.
            last_logged_ms: AtomicI64::new(i64::MIN / 2),
            suppressed: AtomicU64::new(0),
        }
    }

    pub(crate) fn warn(&self, policy: &str, error: &str) {
        let now = chrono::Utc::now().timestamp_millis();
        let last = self.last_logged_ms.load(Ordering::Relaxed);
        if now - last >= Self::QUIET_MS
            && self
                .last_logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
            tracing::warn!(
                policy,
                error,
                suppressed,
                "limiter unavailable, {}",
                self.outcome
            );
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}
