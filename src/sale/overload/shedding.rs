//! Load shedding: at most `limit` admitted purchases in flight at once, the limit set by
//! their latency ([`super::gradient`]); a purchase past it is refused at once.
//!
//! A purchase holds a [`Permit`] from the limiter's admission to its end; the latency
//! it reports is the time to its commit's answer (reservation, pipeline, the
//! committer's queue and batch). Purchases that end before the commit (sold out,
//! already purchased) report none: they say nothing about the commit path.
//!
//! Taking a permit is two atomic operations and no lock; reporting a latency takes the
//! gradient's lock for a few additions (and one window's arithmetic every window).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use prometheus::{IntCounter, IntGauge};
use tokio::time::Instant;

use super::gradient::{Gradient, GradientSettings};
use crate::metrics::Metrics;

/// The purchases in flight and their limit.
pub struct Shedder {
    /// `None`: shedding is off (`shedding_enabled = false`); in flight is still counted.
    gradient: Option<Mutex<Gradient>>,
    limit: AtomicU32,
    in_flight: AtomicU32,
    limit_gauge: IntGauge,
    shed: IntCounter,
}

/// A purchase's place among those in flight; given back when dropped.
pub struct Permit<'a> {
    shedder: &'a Shedder,
    since: Instant,
}

impl Shedder {
    /// `settings` `None`: shedding off. The limit's gauge reads 0 then.
    pub fn new(settings: Option<GradientSettings>, metrics: &Metrics, now: Instant) -> Self {
        let gradient = settings.map(|settings| Gradient::new(settings, now));
        let limit = gradient.as_ref().map_or(u32::MAX, Gradient::limit);
        metrics
            .shedding_limit
            .set(gradient.as_ref().map_or(0, |g| i64::from(g.limit())));
        Self {
            gradient: gradient.map(Mutex::new),
            limit: AtomicU32::new(limit),
            in_flight: AtomicU32::new(0),
            limit_gauge: metrics.shedding_limit.clone(),
            shed: metrics.shedding_shed.clone(),
        }
    }

    /// A place for one more purchase, or `None` (counted as shed) when `limit` are in
    /// flight already.
    pub fn try_acquire(&self, now: Instant) -> Option<Permit<'_>> {
        let limit = self.limit.load(Ordering::Relaxed);
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if before >= limit {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            self.shed.inc();
            return None;
        }
        Some(Permit {
            shedder: self,
            since: now,
        })
    }

    /// Purchases holding a permit now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The limit now (`u32::MAX` while shedding is off).
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    fn sample(&self, since: Instant, now: Instant) {
        let Some(gradient) = &self.gradient else {
            return;
        };
        // A poisoned lock only means a panic elsewhere mid-update: the numbers are
        // still numbers.
        let mut gradient = gradient
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(limit) = gradient.sample(now.saturating_duration_since(since), now) {
            self.limit.store(limit, Ordering::Relaxed);
            self.limit_gauge.set(i64::from(limit));
        }
    }
}

impl Permit<'_> {
    /// The purchase's commit has answered at `now`: its latency is a sample of the
    /// commit path. The place is kept until the permit is dropped.
    pub fn commit_answered(&self, now: Instant) {
        self.shedder.sample(self.since, now);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.shedder.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::gradient::MIN_SAMPLES;
    use super::*;

    fn settings(limit: u32) -> GradientSettings {
        GradientSettings {
            initial: limit,
            min: 2,
            max: limit,
            smoothing: 0.2,
            tolerance: 1.5,
            floor: Duration::from_millis(50),
            window: Duration::from_millis(100),
        }
    }

    #[test]
    fn purchases_past_the_limit_are_shed_and_counted_and_places_come_back() {
        let metrics = Metrics::new().unwrap();
        let now = Instant::now();
        let shedder = Shedder::new(Some(settings(3)), &metrics, now);
        let held: Vec<_> = (0..3).map(|_| shedder.try_acquire(now)).collect();
        assert!(held.iter().all(Option::is_some));
        assert!(shedder.try_acquire(now).is_none());
        assert!(shedder.try_acquire(now).is_none());
        assert_eq!(shedder.in_flight(), 3);
        assert_eq!(metrics.shedding_shed.get(), 2);
        drop(held);
        assert_eq!(shedder.in_flight(), 0);
        assert!(shedder.try_acquire(now).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn slow_commits_lower_the_limit_and_the_gauge() {
        let metrics = Metrics::new().unwrap();
        let shedder = Shedder::new(Some(settings(100)), &metrics, Instant::now());
        assert_eq!(metrics.shedding_limit.get(), 100);
        // A healthy window sets the baseline, then windows of 300 ms commits.
        for latency in [10, 300, 300, 300] {
            for _ in 0..MIN_SAMPLES {
                let permit = shedder.try_acquire(Instant::now()).unwrap();
                tokio::time::advance(Duration::from_millis(latency)).await;
                permit.commit_answered(Instant::now());
            }
        }
        let limit = shedder.limit();
        assert!(limit < 80, "the limit fell: {limit}");
        assert_eq!(metrics.shedding_limit.get(), i64::from(limit));
    }

    #[test]
    fn with_shedding_off_nothing_is_shed_and_in_flight_is_still_counted() {
        let metrics = Metrics::new().unwrap();
        let now = Instant::now();
        let shedder = Shedder::new(None, &metrics, now);
        let held: Vec<_> = (0..10_000)
            .filter_map(|_| shedder.try_acquire(now))
            .collect();
        assert_eq!(held.len(), 10_000);
        assert_eq!(shedder.in_flight(), 10_000);
        held[0].commit_answered(now + Duration::from_secs(60));
        assert_eq!(metrics.shedding_limit.get(), 0);
        assert_eq!(metrics.shedding_shed.get(), 0);
    }
}
