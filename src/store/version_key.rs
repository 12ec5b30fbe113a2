//! A counter in Redis that announces a change of data stored in Postgres: the writer
//! bumps it after its commit, every instance reads it on a timer and rereads Postgres
//! when it moved (`background::watch_version`). The rate-limit rules'
//! (`<prefix>:limiter:version`) and the edge domains' (`<prefix>:rls:version`). One key
//! each, written only by an operator's change: bounded, so it does not expire.

use super::RedisStore;
use crate::metrics::RedisPurpose;

/// One version key.
#[derive(Clone)]
pub struct VersionKey {
    redis: RedisStore,
    key: String,
}

impl VersionKey {
    /// `<prefix>:<name>` on `redis`.
    pub fn new(redis: RedisStore, name: &str) -> Self {
        let key = format!("{}:{name}", redis.prefix());
        Self { redis, key }
    }

    /// Announces a change. A failure is logged, not returned: the change is committed,
    /// and the watchers' periodic reread still picks it up.
    pub async fn bump(&self) {
        let incr = redis::cmd("INCR").arg(&self.key).to_owned();
        if let Err(e) = self.redis.call::<i64>(RedisPurpose::Other, &incr).await {
            tracing::warn!(key = %self.key, error = %e, "could not announce a change");
        }
    }

    /// The version now; `None` before the first change.
    pub async fn get(&self) -> anyhow::Result<Option<i64>> {
        let get = redis::cmd("GET").arg(&self.key).to_owned();
        Ok(self.redis.call(RedisPurpose::Other, &get).await?)
    }
}
