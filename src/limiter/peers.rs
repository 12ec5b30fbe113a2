//! How many instances share the limits: each beats into one sorted set in Redis
//! (`lua/limiter_heartbeat.lua`) and reads back how many beat recently.
//!
//! Only the fallback limits use the count (a rule's share while Redis is away is its
//! threshold over it, see [`super::fallback_limits`]), so it is the count of the last beat
//! Redis answered: during an outage it stays what it was, which is the fleet that was
//! sharing the limits when Redis went. An instance whose beat Redis never answered
//! (Redis went before it) counts the fleet floor (`fleet_floor`, a setting: the fleet's
//! size), never less: alone it would take a whole threshold beside a fleet that holds
//! its shares already. The floor is a setting rather than a count kept elsewhere for a
//! newcomer to read: a count kept before the outage says nothing of the instances
//! started during it, and reading it would need a store that may be away too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Script;

use crate::metrics::RedisPurpose;
use crate::store::RedisStore;

/// A beat counts for this many periods: one late or lost beat does not halve every
/// other instance's share.
const BEATS_KEPT: u32 = 3;

/// This instance's count of the instances sharing the limits, from its beats.
pub struct Peers {
    /// This instance in the set.
    tag: String,
    script: Script,
    alive: AtomicU64,
    /// The fewest instances a share assumes (`LimiterSettings::fleet_floor`).
    floor: u64,
    gauge: prometheus::IntGauge,
}

impl Peers {
    /// A count that starts at `floor`, this instance being `tag` in the set and showing its
    /// count on `gauge`.
    pub fn new(tag: u64, floor: u64, gauge: prometheus::IntGauge) -> Self {
        gauge.set(floor.max(1) as i64);
        Self {
            tag: format!("{tag:016x}"),
            script: Script::new(include_str!("../../lua/limiter_heartbeat.lua")),
            alive: AtomicU64::new(1),
            floor: floor.max(1),
            gauge,
        }
    }

    /// Instances a share is split over: alive at the last beat Redis answered (at
    /// least this one), and never fewer than the floor.
    pub fn alive(&self) -> u64 {
        self.alive.load(Ordering::Relaxed).max(self.floor)
    }

    /// This instance's tag in the set.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The tags of the instances whose beat is within `BEATS_KEPT` periods of the
    /// newest one (this instance beats too, so the newest is about now): what an
    /// operator's change waits for (`history::blocks`).
    pub async fn live(&self, redis: &RedisStore, period: Duration) -> anyhow::Result<Vec<String>> {
        let key = format!("{}:limiter:instances", redis.prefix());
        let range = redis::cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .to_owned();
        let beats: Vec<(String, f64)> = redis.call(RedisPurpose::Other, &range).await?;
        let kept = period.saturating_mul(BEATS_KEPT).as_millis() as f64;
        let newest = beats.iter().map(|(_, at)| *at).fold(f64::MIN, f64::max);
        Ok(beats
            .into_iter()
            .filter(|(_, at)| *at >= newest - kept)
            .map(|(tag, _)| tag)
            .collect())
    }

    /// Beats once; `period` is how often the caller beats.
    pub async fn beat(&self, redis: &RedisStore, period: Duration) -> anyhow::Result<()> {
        let key = format!("{}:limiter:instances", redis.prefix());
        let ttl = period.saturating_mul(BEATS_KEPT).as_millis().max(1) as u64;
        let mut invocation = self.script.prepare_invoke();
        invocation.key(&key).arg(&self.tag).arg(ttl);
        let alive: u64 = redis.call(RedisPurpose::Other, &invocation).await?;
        self.alive.store(alive.max(1), Ordering::Relaxed);
        self.gauge.set(self.alive() as i64);
        Ok(())
    }
}
