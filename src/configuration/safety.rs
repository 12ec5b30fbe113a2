//! Settings that are fine on a laptop and refused at start-up where they would do harm:
//! in production (public secrets, the dev login), or anywhere (timeouts under which the
//! reconciler could undo a live purchase).

use secrecy::{ExposeSecret, SecretString};

use super::{Environment, Settings, LOCAL_ADMIN_TOKEN, LOCAL_JWT_SECRET, LOCAL_QUEUE_SECRET};

/// A setting the application refuses to start with in production.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unsafe setting for production: {setting} {reason}")]
pub struct UnsafeSetting {
    /// The setting's environment variable (`SECKILL_…`).
    pub setting: &'static str,
    /// What is wrong with its value.
    pub reason: &'static str,
}

impl UnsafeSetting {
    fn new(setting: &'static str, reason: &'static str) -> Self {
        Self { setting, reason }
    }
}

/// Refuses settings that are fine on a laptop and dangerous in production. The error
/// names the setting and says why.
pub fn production(settings: &Settings) -> Result<(), UnsafeSetting> {
    if settings.environment != Environment::Production {
        return Ok(());
    }
    if settings.dev_login_enabled() {
        return Err(UnsafeSetting::new(
            "SECKILL_DEV_LOGIN",
            "must be off in production: it hands out tokens for any user id",
        ));
    }
    let secret = settings.jwt_secret.expose_secret();
    if secret == LOCAL_JWT_SECRET {
        return Err(UnsafeSetting::new(
            "SECKILL_JWT_SECRET",
            "is the local default, which is public",
        ));
    }
    if secret.len() < 32 {
        return Err(UnsafeSetting::new(
            "SECKILL_JWT_SECRET",
            "must be at least 32 bytes long",
        ));
    }
    let queue = settings.queue_secret.expose_secret();
    if queue == LOCAL_QUEUE_SECRET {
        return Err(UnsafeSetting::new(
            "SECKILL_QUEUE_SECRET",
            "is the local default, which is public",
        ));
    }
    if queue.len() < 32 {
        return Err(UnsafeSetting::new(
            "SECKILL_QUEUE_SECRET",
            "must be at least 32 bytes long",
        ));
    }
    if queue == secret {
        return Err(UnsafeSetting::new(
            "SECKILL_QUEUE_SECRET",
            "must differ from SECKILL_JWT_SECRET: a key of its own",
        ));
    }
    let admin = settings.admin_token.expose_secret();
    if admin.trim().is_empty() {
        return Err(UnsafeSetting::new(
            "SECKILL_ADMIN_TOKEN",
            "must be set in production",
        ));
    }
    if admin.split(',').any(|entry| {
        entry.trim() == LOCAL_ADMIN_TOKEN
            || entry.trim().ends_with(&format!(":{LOCAL_ADMIN_TOKEN}"))
    }) {
        return Err(UnsafeSetting::new(
            "SECKILL_ADMIN_TOKEN",
            "is the local default `dev-admin-token`, which is public",
        ));
    }
    let tokens = named_secrets(&settings.admin_token);
    if tokens
        .iter()
        .any(|(_, secret)| secret.expose_secret().chars().count() < 32)
    {
        return Err(UnsafeSetting::new(
            "SECKILL_ADMIN_TOKEN",
            "every admin secret (the part after `name:`) must be at least 32 characters long",
        ));
    }
    Ok(())
}

/// Refuses timeouts under which the reconciler could undo a live purchase. After
/// the reservation, the pipeline takes at most one Redis timeout; the order's
/// transaction starts within one commit timeout (the queue) and its batch gives up
/// after another; the transaction then lives at most one more statement
/// (`statement_timeout`, which also bounds the COMMIT) and one idle gap
/// (`idle_in_transaction_session_timeout`) before Postgres ends it. The reservation
/// deadline must be later.
pub fn timeouts(settings: &Settings) -> anyhow::Result<()> {
    let longest_order = 2 * settings.order_commit_timeout_ms
        + settings.database_statement_timeout_ms
        + settings.database_idle_in_transaction_timeout_ms
        + settings.redis_timeout_ms;
    anyhow::ensure!(
        settings.reservation_deadline_ms > longest_order,
        "reservation_deadline_ms ({}) must exceed 2 × order_commit_timeout_ms + \
         database_statement_timeout_ms + database_idle_in_transaction_timeout_ms + \
         redis_timeout_ms ({longest_order}), or the reconciler could undo a purchase \
         whose order is still being committed",
        settings.reservation_deadline_ms
    );
    anyhow::ensure!(
        settings.token_ttl_secs <= settings.token_max_lifetime_secs,
        "token_ttl_secs ({}) must not exceed token_max_lifetime_secs ({}): the dev \
         login would issue tokens the app refuses",
        settings.token_ttl_secs,
        settings.token_max_lifetime_secs
    );
    anyhow::ensure!(
        settings.database_statement_timeout_ms > 0
            && settings.database_idle_in_transaction_timeout_ms > 0,
        "database_statement_timeout_ms and database_idle_in_transaction_timeout_ms \
         must be positive (0 would turn the server-side timeouts off)"
    );
    Ok(())
}

/// Refuses a gate without its secret: the decision endpoint would answer anyone who
/// reaches its port, and a secret of a few bytes is one anyone can guess. Anywhere, not
/// only in production: a laptop's gate is as reachable as its port.
pub fn gate(settings: &Settings) -> anyhow::Result<()> {
    if settings.gate_port.is_none() {
        return Ok(());
    }
    anyhow::ensure!(
        settings.gate_secret.expose_secret().len() >= MIN_GATE_SECRET_BYTES,
        "gate_port is set, so gate_secret (SECKILL_GATE_SECRET) must be at least \
         {MIN_GATE_SECRET_BYTES} bytes: it is what NGINX's internal location proves itself with"
    );
    Ok(())
}

/// The shortest gate secret accepted.
pub const MIN_GATE_SECRET_BYTES: usize = 16;

/// A list of secrets as `SECKILL_ADMIN_TOKEN` spells it: comma-separated, each either
/// `name:secret` (so that changes can be attributed) or a bare secret (named `admin`).
/// Blank entries are ignored, so an empty setting is no token at all.
pub fn named_secrets(configured: &SecretString) -> Vec<(String, SecretString)> {
    configured
        .expose_secret()
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.split_once(':') {
            Some((name, secret)) if !name.is_empty() && !secret.is_empty() => {
                (name.to_string(), SecretString::from(secret))
            }
            _ => ("admin".to_string(), SecretString::from(entry)),
        })
        .collect()
}
