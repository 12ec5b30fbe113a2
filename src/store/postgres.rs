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
pub fn pool(settings: &Settings) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(settings.database_url.expose_secret())
        .context("DATABASE_URL is not a valid Postgres URL")?;
    Ok(PgPoolOptions::new()
        .max_connections(settings.database_max_connections)
        .acquire_timeout(settings.database_acquire_timeout())
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
