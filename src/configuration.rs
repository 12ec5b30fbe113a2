//! Typed settings: defaults in code, optionally a TOML file, then environment variables.
//!
//! Precedence, lowest first:
//! 1. [`Settings::default`] (safe for a laptop, closed for admin endpoints);
//! 2. the file named by `SECKILL_CONFIG` (optional; `config/seckill.toml` when present);
//! 3. the conventional `DATABASE_URL` and `REDIS_URL`;
//! 4. `SECKILL_<FIELD>` variables, e.g. `SECKILL_PORT=9000`, `SECKILL_ADMIN_TOKEN=…`.
//!    Nested tables use a double underscore: `SECKILL_LIMITER__TIMEOUT_MS=100`.
//!
//! Secrets are [`SecretString`]s: their `Debug` output is redacted, so a settings dump
//! in a log line never leaks them.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

pub use crate::limiter::LimiterSettings;

/// The JWT secret used when none is configured. Fine on a laptop; refused in production.
pub const LOCAL_JWT_SECRET: &str = "local-development-jwt-secret-change-me-0000";

/// The admin token `make run` uses locally. Refused in production.
pub const LOCAL_ADMIN_TOKEN: &str = "dev-admin-token";

/// A setting the application refuses to start with in production.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unsafe setting for production: {setting} {reason}")]
pub struct UnsafeSetting {
    pub setting: &'static str,
    pub reason: &'static str,
}

impl UnsafeSetting {
    fn new(setting: &'static str, reason: &'static str) -> Self {
        Self { setting, reason }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    Local,
    Production,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines for a terminal.
    Pretty,
    /// One JSON object per line, for log shippers.
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Settings {
    pub environment: Environment,
    /// Address to bind. Loopback by default: exposing the service is a deliberate act.
    pub host: String,
    /// Port to bind; 0 picks a free one (tests).
    pub port: u16,
    /// actix worker threads; `None` = one per core.
    pub workers: Option<usize>,
    /// How long a graceful shutdown waits for in-flight requests.
    pub shutdown_timeout_secs: u64,

    pub redis_url: SecretString,
    /// Every Redis key this instance writes starts with this, so several deployments
    /// (or parallel tests) can share one Redis without seeing each other.
    pub redis_key_prefix: String,

    pub database_url: SecretString,
    pub database_max_connections: u32,
    /// Kept short on purpose: a request waiting for a connection longer than this
    /// fails cleanly instead of outliving the client's own timeout.
    pub database_acquire_timeout_ms: u64,
    /// Connections reserved for order commits (a pool of their own), so that reads,
    /// however many, can never push a commit into the acquire timeout.
    pub database_commit_connections: u32,
    /// Server-side `statement_timeout` of the app's sessions: a statement the app gave up
    /// on (see `order_commit_timeout_ms`) cannot go on running, holding an item's row
    /// lock, for longer than this.
    pub database_statement_timeout_ms: u64,
    /// Server-side `idle_in_transaction_session_timeout`: a transaction whose client went
    /// away between statements is aborted after this, not left holding locks.
    pub database_idle_in_transaction_timeout_ms: u64,

    /// `tracing` filter directive, e.g. `info` or `seckill=debug,info`.
    pub log_level: String,
    pub log_format: Option<LogFormat>,

    pub jwt_secret: SecretString,
    pub token_ttl_secs: u64,
    /// `POST /api/session` hands out tokens for any user id: a development aid.
    /// `None` = on in `local`, off in `production`.
    pub dev_login: Option<bool>,
    /// Bearer token for `/admin/api/…`. Empty = admin endpoints closed.
    pub admin_token: SecretString,

    /// Per-probe timeout of `GET /health/ready`.
    pub readiness_timeout_ms: u64,
    /// Longest a request body may take to arrive (from the end of its headers): a body
    /// that drips in slower answers 408 `REQUEST_TIMEOUT` instead of holding a worker.
    pub body_timeout_ms: u64,

    /// Peers whose `X-Forwarded-For` is believed. A list, or one comma-separated string
    /// (`SECKILL_TRUSTED_PROXIES=127.0.0.1,::1,10.0.0.5`).
    #[serde(deserialize_with = "ip_list")]
    pub trusted_proxies: Vec<IpAddr>,

    /// Rate-limit policies, the script timeout and the clock source.
    pub limiter: LimiterSettings,

    /// Timeout of each sale Redis call (reservation, pipeline, repair).
    pub redis_timeout_ms: u64,
    /// Longest a purchase waits for the committer to start its order, and longest a
    /// batch may take before its outcome counts as unknown (then Postgres is asked about
    /// the transaction). Keep twice this below the clients' own timeout.
    pub order_commit_timeout_ms: u64,
    /// Most orders the committer writes in one batch (group commit).
    pub commit_batch_max: usize,
    /// Under load, how long a batch that is not full waits for more orders (0: starts
    /// at once, as soon as the previous batch returned). See `committer::Batching`.
    pub commit_linger_ms: u64,
    /// Create a demo item at start-up when there is no item at all (`make run` does).
    pub seed_demo_item: bool,
    /// How long a reservation may stay pending before the reconciler settles it from
    /// Postgres. Must exceed the longest an order transaction can live (see
    /// [`Settings::check_timeouts`]), or live purchases would be undone.
    pub reservation_deadline_ms: u64,
    /// How often (one instance at a time) the reconciler runs.
    pub reconcile_interval_ms: u64,
    /// How long an `Idempotency-Key`'s stored answer is kept. (A claim in progress lives
    /// only as long as a purchase can: reservation deadline + commit timeout.)
    pub idempotency_ttl_secs: u64,
    /// Purchases with an `Idempotency-Key` one user may have in flight at once; more
    /// answer 429 `TOO_MANY_PENDING`. Bounds the claims one login can make exist.
    pub idempotency_max_in_flight: u32,
    /// How often the orders-vs-success-counter pair is exported to metrics.
    pub consistency_interval_secs: u64,
    /// Folder of the web pages served at `/` (the shopper page, `/admin/`).
    pub static_dir: String,
}

fn ip_list<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Vec<IpAddr>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        One(String),
        Many(Vec<String>),
    }
    let items = match Raw::deserialize(de)? {
        Raw::One(s) => s
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect(),
        Raw::Many(v) => v,
    };
    items
        .iter()
        .map(|s| {
            s.parse()
                .map_err(|_| serde::de::Error::custom(format!("{s:?} is not an IP address")))
        })
        .collect()
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            environment: Environment::Local,
            host: "127.0.0.1".into(),
            port: 8080,
            workers: None,
            shutdown_timeout_secs: 10,
            redis_url: SecretString::from("redis://127.0.0.1:6380"),
            redis_key_prefix: "seckill".into(),
            database_url: SecretString::from("postgres://postgres@127.0.0.1:5433/seckill"),
            database_max_connections: 20,
            database_acquire_timeout_ms: 2_000,
            database_commit_connections: 8,
            database_statement_timeout_ms: 5_000,
            database_idle_in_transaction_timeout_ms: 5_000,
            log_level: "info".into(),
            log_format: None,
            jwt_secret: SecretString::from(LOCAL_JWT_SECRET),
            token_ttl_secs: 3_600,
            dev_login: None,
            admin_token: SecretString::from(""),
            readiness_timeout_ms: 500,
            body_timeout_ms: 5_000,
            trusted_proxies: vec![
                IpAddr::from([127, 0, 0, 1]),
                IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            ],
            limiter: LimiterSettings::default(),
            redis_timeout_ms: 500,
            order_commit_timeout_ms: 5_000,
            commit_batch_max: 256,
            commit_linger_ms: 0,
            seed_demo_item: false,
            reservation_deadline_ms: 30_000,
            reconcile_interval_ms: 10_000,
            idempotency_ttl_secs: 86_400,
            idempotency_max_in_flight: 4,
            consistency_interval_secs: 15,
            static_dir: "static".into(),
        }
    }
}

impl Settings {
    /// Reads defaults, the optional file and the environment (see the module docs).
    pub fn load() -> anyhow::Result<Self> {
        let file = std::env::var("SECKILL_CONFIG").unwrap_or_else(|_| "config/seckill.toml".into());
        let mut builder = config::Config::builder()
            .add_source(config::File::with_name(&file).required(false))
            .add_source(
                config::Environment::with_prefix("SECKILL")
                    .prefix_separator("_")
                    .separator("__")
                    // SECKILL_CONFIG names the file; it is not a setting.
                    .source(Some(
                        std::env::vars()
                            .filter(|(k, _)| k != "SECKILL_CONFIG")
                            .collect(),
                    )),
            );
        for (conventional, key) in [("DATABASE_URL", "database_url"), ("REDIS_URL", "redis_url")] {
            let ours = format!("SECKILL_{}", key.to_uppercase());
            if std::env::var_os(&ours).is_none() {
                builder = builder.set_override_option(key, std::env::var(conventional).ok())?;
            }
        }
        builder
            .build()
            .context("reading settings")?
            .try_deserialize()
            .context("settings are invalid")
    }

    /// Refuses settings that are fine on a laptop and dangerous in production. The error
    /// names the setting and says why.
    pub fn check_production_safety(&self) -> Result<(), UnsafeSetting> {
        if self.environment != Environment::Production {
            return Ok(());
        }
        if self.dev_login_enabled() {
            return Err(UnsafeSetting::new(
                "SECKILL_DEV_LOGIN",
                "must be off in production: it hands out tokens for any user id",
            ));
        }
        let secret = self.jwt_secret.expose_secret();
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
        let admin = self.admin_token.expose_secret();
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
        let tokens = crate::identity::AdminTokens::parse(&self.admin_token);
        if tokens.secrets().any(|secret| secret.chars().count() < 32) {
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
    pub fn check_timeouts(&self) -> anyhow::Result<()> {
        let longest_order = 2 * self.order_commit_timeout_ms
            + self.database_statement_timeout_ms
            + self.database_idle_in_transaction_timeout_ms
            + self.redis_timeout_ms;
        anyhow::ensure!(
            self.reservation_deadline_ms > longest_order,
            "reservation_deadline_ms ({}) must exceed 2 × order_commit_timeout_ms + \
             database_statement_timeout_ms + database_idle_in_transaction_timeout_ms + \
             redis_timeout_ms ({longest_order}), or the reconciler could undo a purchase \
             whose order is still being committed",
            self.reservation_deadline_ms
        );
        anyhow::ensure!(
            self.database_statement_timeout_ms > 0
                && self.database_idle_in_transaction_timeout_ms > 0,
            "database_statement_timeout_ms and database_idle_in_transaction_timeout_ms \
             must be positive (0 would turn the server-side timeouts off)"
        );
        Ok(())
    }

    pub fn dev_login_enabled(&self) -> bool {
        self.dev_login
            .unwrap_or(self.environment == Environment::Local)
    }

    pub fn log_format(&self) -> LogFormat {
        self.log_format.unwrap_or(match self.environment {
            Environment::Local => LogFormat::Pretty,
            Environment::Production => LogFormat::Json,
        })
    }

    pub fn database_acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.database_acquire_timeout_ms)
    }

    pub fn readiness_timeout(&self) -> Duration {
        Duration::from_millis(self.readiness_timeout_ms)
    }

    pub fn admin_endpoints_open(&self) -> bool {
        !self.admin_token.expose_secret().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_secrets() {
        let settings = Settings {
            jwt_secret: SecretString::from("jwt-very-secret"),
            admin_token: SecretString::from("admin-very-secret"),
            database_url: SecretString::from("postgres://u:db-very-secret@h/d"),
            ..Settings::default()
        };
        let dump = format!("{settings:?}");
        for secret in ["jwt-very-secret", "admin-very-secret", "db-very-secret"] {
            assert!(!dump.contains(secret), "{secret} leaked into {dump}");
        }
    }

    fn production() -> Settings {
        Settings {
            environment: Environment::Production,
            jwt_secret: SecretString::from("a-production-secret-of-at-least-32-bytes"),
            admin_token: SecretString::from("ops:a-long-random-admin-token-of-32-chars"),
            ..Settings::default()
        }
    }

    #[test]
    fn production_refuses_a_short_admin_secret_and_names_the_setting() {
        for weak in [
            "ops:x",
            "x",
            "ops:a-long-random-admin-token-of-32",
            "ops:x,ci:short",
        ] {
            let settings = Settings {
                admin_token: SecretString::from(weak),
                ..production()
            };
            let refusal = settings
                .check_production_safety()
                .expect_err("a secret under 32 characters is refused");
            assert_eq!(refusal.setting, "SECKILL_ADMIN_TOKEN", "{weak}");
        }
        let strong = Settings {
            admin_token: SecretString::from(
                "ops:0123456789abcdef0123456789abcdef,ci:fedcba9876543210fedcba9876543210",
            ),
            ..production()
        };
        assert_eq!(strong.check_production_safety(), Ok(()));
    }

    #[test]
    fn the_reservation_deadline_must_outlast_every_order_transaction() {
        assert!(Settings::default().check_timeouts().is_ok());
        let tight = Settings {
            reservation_deadline_ms: 20_500,
            ..Settings::default()
        };
        let refusal = tight.check_timeouts().unwrap_err().to_string();
        assert!(
            refusal.contains("reservation_deadline_ms (20500)"),
            "{refusal}"
        );
        let just_above = Settings {
            reservation_deadline_ms: 20_501,
            ..Settings::default()
        };
        assert!(just_above.check_timeouts().is_ok());
    }

    #[test]
    fn production_refuses_each_unsafe_setting_and_names_it() {
        assert_eq!(production().check_production_safety(), Ok(()));
        let refused = |s: Settings| s.check_production_safety().unwrap_err().setting;
        assert_eq!(
            refused(Settings {
                dev_login: Some(true),
                ..production()
            }),
            "SECKILL_DEV_LOGIN"
        );
        assert_eq!(
            refused(Settings {
                jwt_secret: SecretString::from("short"),
                ..production()
            }),
            "SECKILL_JWT_SECRET"
        );
        assert_eq!(
            refused(Settings {
                jwt_secret: SecretString::from(LOCAL_JWT_SECRET),
                ..production()
            }),
            "SECKILL_JWT_SECRET"
        );
        assert_eq!(
            refused(Settings {
                admin_token: SecretString::from(""),
                ..production()
            }),
            "SECKILL_ADMIN_TOKEN"
        );
        assert_eq!(
            refused(Settings {
                admin_token: SecretString::from("dev-admin-token"),
                ..production()
            }),
            "SECKILL_ADMIN_TOKEN"
        );
        assert_eq!(
            refused(Settings {
                admin_token: SecretString::from("ops:dev-admin-token"),
                ..production()
            }),
            "SECKILL_ADMIN_TOKEN"
        );
        // The same settings are fine on a laptop.
        assert_eq!(
            Settings {
                dev_login: Some(true),
                ..Settings::default()
            }
            .check_production_safety(),
            Ok(())
        );
    }

    #[test]
    fn dev_login_follows_the_environment_unless_set() {
        let local = Settings::default();
        assert!(local.dev_login_enabled());
        let production = Settings {
            environment: Environment::Production,
            ..Settings::default()
        };
        assert!(!production.dev_login_enabled());
        let forced = Settings {
            dev_login: Some(false),
            ..Settings::default()
        };
        assert!(!forced.dev_login_enabled());
    }
}
