//! Live counters summed over **all** instances, for the admin dashboard.
//!
//! Each instance adds what happened since its last flush to a per-second bucket in Redis
//! (`<prefix>:stats:<unix second>`, a hash, kept for an hour) once a second, off the
//! request path: the requests themselves only touch in-process counters. The dashboard
//! sums the buckets of the last N seconds in one round trip.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::background::Ticks;
use crate::configuration::policies::SECKILL_POLICY;
use crate::limiter::Limiter;
use crate::metrics::{Metrics, RedisPurpose};
use crate::store::RedisStore;

/// How long a bucket is kept: the longest window the dashboard may ask for.
pub const MAX_WINDOW_SECS: u64 = 3_600;

pub struct LiveStats {
    redis: RedisStore,
    metrics: Arc<Metrics>,
    limiter: Arc<Limiter>,
}

impl LiveStats {
    pub fn new(redis: RedisStore, metrics: Arc<Metrics>, limiter: Arc<Limiter>) -> Self {
        Self {
            redis,
            metrics,
            limiter,
        }
    }

    fn bucket(&self, second: i64) -> String {
        format!("{}:stats:{second}", self.redis.prefix())
    }

    /// This instance's running totals, by field: `pass:<dimension>`,
    /// `reject:<dimension>` (policy `seckill`), `orders`, `fail_open`.
    fn totals(&self) -> BTreeMap<String, i64> {
        let mut totals = BTreeMap::new();
        if let Some(policy) = self.limiter.policy(SECKILL_POLICY) {
            for rule in &policy.rules {
                for outcome in ["pass", "reject"] {
                    let count = self
                        .metrics
                        .limiter_decisions
                        .with_label_values(&[SECKILL_POLICY, &rule.name, outcome])
                        .get();
                    totals.insert(format!("{outcome}:{}", rule.name), count as i64);
                }
            }
        }
        totals.insert(
            "orders".into(),
            self.metrics
                .sale_outcomes
                .with_label_values(&["created"])
                .get() as i64,
        );
        let fail_open = self
            .limiter
            .policy_names()
            .iter()
            .map(|p| self.metrics.limiter_fail_open.with_label_values(&[p]).get())
            .sum::<u64>();
        totals.insert("fail_open".into(), fail_open as i64);
        totals
    }

    /// Runs forever: once a second, adds the deltas since the last flush to the bucket
    /// of the current second.
    pub async fn run(self: Arc<Self>) {
        let mut last = self.totals();
        let mut ticks = Ticks::new("stats flush", Duration::from_secs(1));
        loop {
            ticks.next().await;
            self.flush(&mut last).await;
        }
    }

    /// Adds the counters' growth since `last` to the current second's bucket; `last`
    /// moves on only when that reached Redis, so a failed flush is retried.
    async fn flush(&self, last: &mut BTreeMap<String, i64>) {
        let now = self.totals();
        let deltas: Vec<(String, i64)> = now
            .iter()
            .map(|(field, value)| (field.clone(), value - last.get(field).copied().unwrap_or(0)))
            .filter(|(_, delta)| *delta != 0)
            .collect();
        if deltas.is_empty() {
            *last = now;
            return;
        }
        let key = self.bucket(chrono::Utc::now().timestamp());
        let mut pipe = redis::pipe();
        for (field, delta) in &deltas {
            pipe.hincr(&key, field, *delta).ignore();
        }
        pipe.expire(&key, MAX_WINDOW_SECS as i64 + 60).ignore();
        match self.redis.call::<()>(RedisPurpose::Other, &pipe).await {
            Ok(()) => *last = now,
            // Once a second while Redis is down: not worth a warning each.
            Err(e) => tracing::debug!(error = %e, "stats flush failed"),
        }
    }

    /// Sums over all instances for the last `window_secs` seconds.
    pub async fn sums(&self, window_secs: u64) -> anyhow::Result<BTreeMap<String, i64>> {
        let window = window_secs.clamp(1, MAX_WINDOW_SECS) as i64;
        let now = chrono::Utc::now().timestamp();
        let mut pipe = redis::pipe();
        for second in (now - window + 1)..=now {
            pipe.hgetall(self.bucket(second));
        }
        let buckets: Vec<BTreeMap<String, i64>> =
            self.redis.call(RedisPurpose::Other, &pipe).await?;
        let mut sums = BTreeMap::new();
        for bucket in buckets {
            for (field, value) in bucket {
                *sums.entry(field).or_insert(0) += value;
            }
        }
        Ok(sums)
    }
}
