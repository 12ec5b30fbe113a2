//! The Postgres pool and the embedded migrations.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use crate::configuration::Settings;

/// Builds the pool lazily: the first connection is made on first use, so a restarting
/// Postgres delays readiness instead of failing start-up.
///
/// No ping before each acquire (sqlx's `test_before_acquire` default): it cost an extra
/// round trip on every order. What replaces it: a connection that broke is closed by
/// sqlx when a query on it fails, and that query's purchase fails cleanly (Redis is
/// repaired, the client gets a retryable 503); idle connections are recycled after a
/// minute and every connection after 30 minutes, so a restarted Postgres or a dropped
/// NAT entry does not leave stale sockets in the pool for long; and the readiness
/// probe still asks Postgres on every call.
pub fn pool(settings: &Settings) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(settings.database_url.expose_secret())
        .context("DATABASE_URL is not a valid Postgres URL")?;
    Ok(PgPoolOptions::new()
        .max_connections(settings.database_max_connections)
        .acquire_timeout(settings.database_acquire_timeout())
        .test_before_acquire(false)
        .idle_timeout(Duration::from_secs(60))
        .max_lifetime(Duration::from_secs(30 * 60))
        .connect_lazy_with(options))
}

/// Applies `migrations/` (embedded at compile time). Safe to run on every start and by
/// several instances at once: sqlx takes an advisory lock.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::migrate!("./migrations")
        .run(pool)
        .await
        .context("applying database migrations")
}

/// Readiness probe: one trivial query within `timeout`.
pub async fn ping(pool: &PgPool, timeout: Duration) -> anyhow::Result<()> {
    tokio::time::timeout(timeout, sqlx::query("SELECT 1").execute(pool))
        .await
        .context("postgres did not answer in time")?
        .context("postgres query failed")?;
    Ok(())
}
