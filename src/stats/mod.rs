//! Live counters summed over **all** instances, for the admin dashboard.
//!
//! Each instance adds what happened since its last flush to a per-second bucket in Redis
//! (`<prefix>:{stats}:<unix second>`, a hash, kept for an hour) once a second, off the
//! request path: the requests themselves only touch in-process counters. The dashboard
//! sums the buckets of the last N seconds in one round trip and reads them as [`Sums`],
//! or reads them second by second as a [`Series`] for its charts.
//!
//! A bucket's fields, written and read here (and in [`series`]) only:
//! `pass:<dimension>`, `reject:<dimension>` and `local:<dimension>` (the `seckill`
//! policy's rules; `local` = refused by the denial cache without asking Redis),
//! `shadow:<dimension>` (what its shadow rules would have refused) and
//! `near:<dimension>` (admissions that left a rule above 80 % of its quota used),
//! `orders` (purchases that created one), `outcome:<word>` (the purchase's other
//! outcomes, by their metric word), `fail_open` (every policy), all added to; and
//! `stock:<item id>`, the item's live stock as sampled that second, set (several
//! instances setting it in the same second write the same or a fresher value).
//!
//! The same pipeline appends the second's record to the history stream
//! (`<prefix>:{stats}:history`, [`record`]; built by [`recorder`]): every policy's
//! decisions, per item the purchases' outcomes and the room's counts, the refusal
//! samples and, once a minute, the heavy hitters. One writer, one slot, no extra round
//! trip; docs/history.md, "The decision stream".

mod bucket_fields;
pub mod record;
pub mod recorder;
pub mod series;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::background::Ticks;
use crate::configuration::policies::SECKILL_POLICY;
use crate::configuration::HistorySettings;
use crate::limiter::Limiter;
use crate::metrics::{Metrics, RedisPurpose};
use crate::store::RedisStore;
use crate::tally::Counted;
use crate::vocabulary::{Decision, Outcome};
use bucket_fields::{FAIL_OPEN, LOCAL, NEAR, ORDERS, OUTCOME, PASS, REJECT, SHADOW, STOCK};
use recorder::{Draft, Recorder};
use series::Series;

/// How long a bucket is kept: the longest window the dashboard may ask for.
pub const MAX_WINDOW_SECS: u64 = 3_600;

/// The longest window of [`LiveStats::series`]: the dashboard's charts, read every second.
pub const MAX_SERIES_SECS: u64 = 300;

/// What happened over a window, summed over every instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sums {
    /// Admissions of the sale's policy, by dimension (rule name).
    pub passes: BTreeMap<String, i64>,
    /// Its refusals, by the dimension that refused.
    pub rejections: BTreeMap<String, i64>,
    /// What its shadow rules would have refused, by rule.
    pub shadow_refusals: BTreeMap<String, i64>,
    /// Its admissions that left a rule above 80 % of its quota used, by rule.
    pub near_limit: BTreeMap<String, i64>,
    /// Orders created.
    pub orders: i64,
    /// Requests let through because the limiter could not ask Redis, every policy.
    pub fail_open: i64,
    /// The purchases' other outcomes, by their word (`vocabulary::Outcome`).
    pub outcomes: BTreeMap<String, i64>,
}

impl Sums {
    /// Reads summed bucket fields; a field of another version's making is left out.
    fn from_fields(fields: BTreeMap<String, i64>) -> Self {
        let mut sums = Self::default();
        for (field, value) in fields {
            if let Some(dimension) = field.strip_prefix(PASS) {
                sums.passes.insert(dimension.to_string(), value);
            } else if let Some(dimension) = field.strip_prefix(REJECT) {
                sums.rejections.insert(dimension.to_string(), value);
            } else if let Some(dimension) = field.strip_prefix(SHADOW) {
                sums.shadow_refusals.insert(dimension.to_string(), value);
            } else if let Some(dimension) = field.strip_prefix(NEAR) {
                sums.near_limit.insert(dimension.to_string(), value);
            } else if field == ORDERS {
                sums.orders = value;
            } else if field == FAIL_OPEN {
                sums.fail_open = value;
            } else if let Some(outcome) = field.strip_prefix(OUTCOME) {
                sums.outcomes.insert(outcome.to_string(), value);
            }
        }
        sums
    }
}

/// The dashboard's counters summed over every instance: each instance's flush, and the
/// reads of the buckets (see the module docs).
pub struct LiveStats {
    redis: RedisStore,
    metrics: Arc<Metrics>,
    limiter: Arc<Limiter>,
    history: HistorySettings,
    /// `lua/history_append.lua`.
    append: redis::Script,
}

impl LiveStats {
    /// Over `redis` (the buckets and the history stream), this instance's `metrics`
    /// and the `limiter`'s policies, with the `history`'s settings (the stream's cap,
    /// the samples' bound).
    pub fn new(
        redis: RedisStore,
        metrics: Arc<Metrics>,
        limiter: Arc<Limiter>,
        history: &HistorySettings,
    ) -> Self {
        metrics
            .history_backlog_cap
            .set(history.stream_max_len.min(i64::MAX as u64) as i64);
        Self {
            redis,
            metrics,
            limiter,
            history: history.clone(),
            append: redis::Script::new(include_str!("../../lua/history_append.lua")),
        }
    }

    /// One hash per second. The `{stats}` hash tag keeps every second in one slot, so
    /// the window's read stays one pipeline on a Redis Cluster too.
    fn bucket(&self, second: i64) -> String {
        format!("{}:{{stats}}:{second}", self.redis.prefix())
    }

    /// The `seckill` policy's dimensions (rule names) in force here: the enforced
    /// rules, then the shadow ones.
    fn dimensions(&self) -> (Vec<String>, Vec<String>) {
        let Some(policy) = self.limiter.policy(SECKILL_POLICY) else {
            return Default::default();
        };
        let names =
            |rules: &[crate::limiter::policy::Rule]| rules.iter().map(|r| r.name.clone()).collect();
        let (enforced, shadow) = policy.rules.split_at(policy.enforced);
        (names(enforced), names(shadow))
    }

    /// This instance's running totals, by bucket field: the tally's (`crate::tally`),
    /// the `seckill` policy's decisions by dimension, every policy's fail-opens, the
    /// purchases by outcome.
    fn totals(&self) -> BTreeMap<String, i64> {
        let mut totals = BTreeMap::new();
        // The tally reads local refusals before decisions (see `Counted`): one is counted
        // as a rejection before it is counted as local, so a snapshot never has more
        // local than rejected.
        for (counted, total) in self.metrics.tally.totals() {
            let field = match counted {
                Counted::LocalRefusal { policy, rule } if policy == SECKILL_POLICY => {
                    format!("{LOCAL}{rule}")
                }
                Counted::Decision {
                    policy,
                    rule,
                    decision,
                } if policy == SECKILL_POLICY => match decision {
                    Decision::Pass => format!("{PASS}{rule}"),
                    Decision::Reject => format!("{REJECT}{rule}"),
                },
                Counted::ShadowRefusal { policy, rule } if policy == SECKILL_POLICY => {
                    format!("{SHADOW}{rule}")
                }
                Counted::NearLimit { policy, rule } if policy == SECKILL_POLICY => {
                    format!("{NEAR}{rule}")
                }
                Counted::FailOpen { .. } => FAIL_OPEN.to_string(),
                Counted::Purchase(Outcome::Created) => ORDERS.to_string(),
                Counted::Purchase(outcome) => format!("{OUTCOME}{}", outcome.label()),
                Counted::LocalRefusal { .. }
                | Counted::Decision { .. }
                | Counted::ShadowRefusal { .. }
                | Counted::NearLimit { .. }
                | Counted::Blocked { .. } => continue,
            };
            *totals.entry(field).or_insert(0) += total as i64;
        }
        totals
    }

    /// Runs forever: once a second, adds the deltas since the last flush to the bucket
    /// of the current second, and appends the second's record to the history stream.
    pub async fn run(self: Arc<Self>) {
        let mut last = self.totals();
        let instance = format!("{:016x}", self.limiter.instance_tag());
        let mut recorder = Recorder::new(
            instance,
            self.history.samples_per_second,
            &self.metrics.tally,
            chrono::Utc::now().timestamp(),
        );
        let mut ticks = Ticks::new("stats flush", Duration::from_secs(1));
        loop {
            ticks.next().await;
            self.flush(&mut last, &mut recorder).await;
        }
    }

    /// Adds the counters' growth since `last` to the current second's bucket, with the
    /// stock of every item on sale, and appends the record of what moved since the last
    /// one (`recorder`) in the same pipeline; `last` and the recorder move on only when
    /// that reached Redis, so a failed flush is retried (its stock sample is simply
    /// missing).
    async fn flush(&self, last: &mut BTreeMap<String, i64>, recorder: &mut Recorder) {
        let now = self.totals();
        let deltas: Vec<(String, i64)> = now
            .iter()
            .map(|(field, value)| (field.clone(), value - last.get(field).copied().unwrap_or(0)))
            .filter(|(_, delta)| *delta != 0)
            .collect();
        // What the sold-out refresh read from Redis this second: no read of our own.
        let stock = self.metrics.tally.stock();
        let second = chrono::Utc::now().timestamp();
        let dropped_samples = |n| {
            self.metrics
                .history_dropped
                .with_label_values(&["sample"])
                .inc_by(n)
        };
        let draft = match recorder.draft(&self.metrics.tally, second, dropped_samples) {
            // The history off (a cap of 0): the second is drafted and let go at once, so
            // nothing piles up waiting for a stream that will never take it.
            Some(draft) if self.history.stream_max_len == 0 => {
                recorder.written(draft);
                None
            }
            draft => draft,
        };
        if deltas.is_empty() && stock.is_empty() && draft.is_none() {
            *last = now;
            return;
        }
        let key = self.bucket(second);
        let mut pipe = redis::pipe();
        if !deltas.is_empty() || !stock.is_empty() {
            for (field, delta) in &deltas {
                pipe.hincr(&key, field, *delta).ignore();
            }
            for (item, remaining) in &stock {
                pipe.hset(&key, format!("{STOCK}{item}"), *remaining)
                    .ignore();
            }
            pipe.expire(&key, MAX_WINDOW_SECS as i64 + 60).ignore();
        }
        let Some(draft) = draft else {
            match self.redis.call::<()>(RedisPurpose::Other, &pipe).await {
                Ok(()) => *last = now,
                // Once a second while Redis is down: not worth a warning each.
                Err(e) => tracing::debug!(error = %e, "stats flush failed"),
            }
            return;
        };
        let json = match serde_json::to_string(&draft.record) {
            Ok(json) => json,
            Err(e) => {
                tracing::error!(error = %e, "could not write a history record");
                self.appended(Some((0, self.metrics.history_backlog.get())));
                return recorder.written(draft);
            }
        };
        let stream = record::stream_key(self.redis.prefix());
        let mut append = self.append.key(&stream);
        append.arg(self.history.stream_max_len).arg(&json);
        pipe.invoke_script(&append);
        match self
            .redis
            .call::<Vec<(i64, i64)>>(RedisPurpose::Other, &pipe)
            .await
        {
            Ok(replies) => {
                *last = now;
                self.appended(replies.first().copied());
                recorder.written(draft);
            }
            // The script is not loaded on this server yet (a fresh or restarted Redis):
            // the buckets' commands ran; the record goes alone, loading the script.
            Err(e) if no_script(&e) => {
                *last = now;
                self.append_alone(&append, recorder, draft).await;
            }
            Err(e) => tracing::debug!(error = %e, "stats flush failed"),
        }
    }

    async fn append_alone(
        &self,
        append: &redis::ScriptInvocation<'_>,
        recorder: &mut Recorder,
        draft: Draft,
    ) {
        match self
            .redis
            .call::<(i64, i64)>(RedisPurpose::Other, append)
            .await
        {
            Ok(reply) => {
                self.appended(Some(reply));
                recorder.written(draft);
            }
            Err(e) => tracing::debug!(error = %e, "history append failed"),
        }
    }

    /// The append script's reply: the backlog, and a record dropped at the cap.
    fn appended(&self, reply: Option<(i64, i64)>) {
        let Some((appended, length)) = reply else {
            return;
        };
        self.metrics.history_backlog.set(length);
        if appended == 0 {
            self.metrics
                .history_dropped
                .with_label_values(&["record"])
                .inc();
        }
    }

    /// Every bucket from second `from` on, `count` of them, in one pipeline.
    async fn buckets(&self, from: i64, count: i64) -> anyhow::Result<Vec<BTreeMap<String, i64>>> {
        let mut pipe = redis::pipe();
        for second in from..from + count {
            pipe.hgetall(self.bucket(second));
        }
        Ok(self.redis.call(RedisPurpose::Other, &pipe).await?)
    }

    /// Sums over all instances for the last `window_secs` seconds.
    pub async fn sums(&self, window_secs: u64) -> anyhow::Result<Sums> {
        let window = window_secs.clamp(1, MAX_WINDOW_SECS) as i64;
        let now = chrono::Utc::now().timestamp();
        let mut fields = BTreeMap::new();
        for bucket in self.buckets(now - window + 1, window).await? {
            for (field, value) in bucket {
                *fields.entry(field).or_insert(0) += value;
            }
        }
        Ok(Sums::from_fields(fields))
    }

    /// The last `window_secs` whole seconds (the current one is still being flushed
    /// into), second by second, summed over all instances.
    pub async fn series(&self, window_secs: u64) -> anyhow::Result<Series> {
        let window = window_secs.clamp(1, MAX_SERIES_SECS) as i64;
        let from = chrono::Utc::now().timestamp() - window;
        let buckets = self.buckets(from, window).await?;
        let (enforced, shadow) = self.dimensions();
        Ok(Series::from_buckets(from, &buckets, &enforced, &shadow))
    }
}

/// Whether Redis refused a script call for not knowing the script (`NOSCRIPT`).
fn no_script(error: &crate::store::redis_store::RedisCallError) -> bool {
    match error {
        crate::store::redis_store::RedisCallError::Failed { source, .. } => {
            source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
                || source.to_string().contains("NOSCRIPT")
        }
        crate::store::redis_store::RedisCallError::Timeout { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_fields_read_back_as_typed_sums() {
        let fields = [
            ("pass:api", 7),
            ("pass:user", 5),
            ("reject:ip", 2),
            ("shadow:tight", 6),
            ("near:user", 8),
            ("orders", 4),
            ("fail_open", 1),
            ("outcome:sold_out", 3),
            ("from_a_later_version", 9),
        ];
        let sums = Sums::from_fields(fields.iter().map(|(f, v)| (f.to_string(), *v)).collect());
        assert_eq!(
            sums,
            Sums {
                passes: [("api".to_string(), 7), ("user".to_string(), 5)].into(),
                rejections: [("ip".to_string(), 2)].into(),
                shadow_refusals: [("tight".to_string(), 6)].into(),
                near_limit: [("user".to_string(), 8)].into(),
                orders: 4,
                fail_open: 1,
                outcomes: [("sold_out".to_string(), 3)].into(),
            }
        );
    }
}
