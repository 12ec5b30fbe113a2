//! The Postgres pool and the embedded migrations.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

/// Where Postgres is and the server-side timeouts every session carries (from the
/// settings: `Settings::postgres_options`).
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The database. A secret: it may carry a password.
    pub url: SecretString,
    /// `statement_timeout` of every session, in milliseconds.
    pub statement_timeout_ms: u64,
    /// `idle_in_transaction_session_timeout` of every session, in milliseconds: a
    /// transaction left open by a stuck task is ended.
    pub idle_in_transaction_timeout_ms: u64,
}

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
///
/// Every session carries server-side `statement_timeout` and
/// `idle_in_transaction_session_timeout`: when the app gives up on a statement, Postgres
/// ends it soon after instead of letting it hold an item's row lock, and the reconciler
/// can rely on no order transaction outliving the reservation deadline.
pub fn pool(
    settings: &PostgresOptions,
    max_connections: u32,
    acquire_timeout: Duration,
) -> anyhow::Result<PgPool> {
    let options = connect_options(settings)?;
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .test_before_acquire(false)
        .idle_timeout(Duration::from_secs(60))
        .max_lifetime(Duration::from_secs(30 * 60))
        .connect_lazy_with(options))
}

/// How to open one session: the URL with the session timeouts every connection carries
/// (the pools' and the committers' own connections alike).
pub fn connect_options(settings: &PostgresOptions) -> anyhow::Result<PgConnectOptions> {
    Ok(PgConnectOptions::from_str(settings.url.expose_secret())
        .context("DATABASE_URL is not a valid Postgres URL")?
        .options([
            (
                "statement_timeout",
                settings.statement_timeout_ms.to_string(),
            ),
            (
                "idle_in_transaction_session_timeout",
                settings.idle_in_transaction_timeout_ms.to_string(),
            ),
        ]))
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
