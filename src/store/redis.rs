//! The shared Redis connection.
//!
//! One multiplexed [`ConnectionManager`] per process: every request pipelines over the
//! same socket, and the manager reconnects by itself after Redis restarts. Callers still
//! bound every call with a timeout, because a command issued while the manager is
//! reconnecting waits for that attempt.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use secrecy::ExposeSecret;

use crate::configuration::Settings;

#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: Arc<str>,
}

impl RedisStore {
    pub async fn connect(settings: &Settings) -> anyhow::Result<Self> {
        let client = redis::Client::open(settings.redis_url.expose_secret())
            .context("REDIS_URL is not a valid Redis URL")?;
        // One connection attempt per reconnect, no backoff: commands issued while the
        // manager reconnects wait for that attempt, and with retries a refused
        // connection made every request wait out the backoff (measured: 250 ms each,
        // the limiter timeout, instead of 0.2 ms). Each failed command starts a new
        // attempt, so the first command after Redis returns reconnects.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_millis(500))
            .set_response_timeout(Duration::from_secs(2))
            .set_number_of_retries(0);
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .context("connecting to Redis")?;
        Ok(Self {
            conn,
            prefix: settings.redis_key_prefix.as_str().into(),
        })
    }

    /// A handle on the shared connection; cheap to clone, use one per call site.
    pub fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// The key prefix of this deployment (see `Settings::redis_key_prefix`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Readiness probe: `PING` within `timeout`.
    pub async fn ping(&self, timeout: Duration) -> anyhow::Result<()> {
        let mut conn = self.conn();
        let ping = redis::cmd("PING");
        tokio::time::timeout(timeout, ping.query_async::<String>(&mut conn))
            .await
            .context("redis did not answer in time")?
            .context("redis PING failed")?;
        Ok(())
    }
}
