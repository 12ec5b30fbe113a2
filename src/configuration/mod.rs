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
//!
//! - this file: [`Settings`], their defaults and loading;
//! - [`policies`]: the app's rate-limit policies (names and defaults), which the limiter
//!   engine knows nothing of;
//! - [`safety`]: settings refused at start-up (production safety, timeouts); it reads
//!   [`Settings`], so `startup` calls it rather than a method of `Settings`.

pub mod history_settings;
pub mod policies;
pub mod safety;
#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::time::Duration;

use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

pub use crate::limiter::LimiterSettings;
pub use history_settings::HistorySettings;
pub use safety::{named_secrets, UnsafeSetting};

/// The JWT secret used when none is configured. Fine on a laptop; refused in production.
pub const LOCAL_JWT_SECRET: &str = "local-development-jwt-secret-change-me-0000";

/// The waiting room's signing key (tickets and passes) when none is configured. Fine
/// on a laptop; refused in production.
pub const LOCAL_QUEUE_SECRET: &str = "local-development-queue-secret-change-me-00";

/// The admin token `make run` uses locally. Refused in production.
pub const LOCAL_ADMIN_TOKEN: &str = "dev-admin-token";

/// Where the process runs: decides the log format's default, the development sign-in's, and
/// whether the unsafe local defaults are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    /// A laptop or a test: pretty logs, the development sign-in on, local secrets allowed.
    Local,
    /// A deployment: JSON logs, and start-up refuses the unsafe local settings (`safety`).
    Production,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines for a terminal.
    Pretty,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Every setting, flat: a field's name is its file key and, upper-cased after
/// `SECKILL_`, its environment variable, which deployments use as they are. The
/// sections below are those of the README's table.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct Settings {
    // Server: where and how the process serves.
    /// `local` or `production` (see [`Environment`]).
    pub environment: Environment,
    /// The commit this build came from, as `seckill_build_info` names it (`make run`
    /// sets it from git, the Docker image from its build argument): read at start, so
    /// it never makes cargo rebuild.
    pub commit: String,
    /// Address to bind. Loopback by default: exposing the service is a deliberate act.
    pub host: String,
    /// Port to bind; 0 picks a free one (tests).
    pub port: u16,
    /// actix worker threads; `None` = one per core.
    pub workers: Option<usize>,
    /// Connections each worker serves at once; further ones wait in the listen backlog
    /// until one closes. Resident memory follows open connections (15-18 kB each,
    /// docs/soak.md), so this is what bounds it: actix's own default is 25 000. 4 096, so
    /// that a botnet's 4 400 slow heads fit in two workers' budget of waiting connections
    /// (below) and are cut at their deadline, not churned into a flood of connects.
    pub max_connections: usize,
    /// Connections each worker may hold waiting for a request head (new, trickling or idle
    /// between requests); a newcomer that finds the listener's budget (this × workers)
    /// full closes the one that has waited longest. Below `max_connections`, a botnet's
    /// idle heads never stop the workers accepting (`http::head_budget`); above it, 7/8
    /// of it is used.
    pub max_connections_awaiting_head: usize,
    /// Connections one client address (IPv6: its /64) may hold open over every worker;
    /// more are closed as they arrive. Trusted proxies are exempt (`http::connections`).
    pub max_connections_per_address: u32,
    /// Connections the kernel queues per listener until accepted (≤ `net.core.somaxconn`).
    pub listen_backlog: u32,
    /// Longest a request head may take from the connection opening or the previous
    /// answer, however it trickles; then the connection ends (an idle one too).
    pub head_timeout_ms: u64,
    /// Port of the probe listener (`/health/live`, `/health/ready`, `/metrics` on a
    /// worker and connections of their own, so they answer while the service's
    /// connections are all taken); 0 picks a free one. Same address as `host`.
    pub probe_port: u16,
    /// How long a graceful shutdown waits for in-flight requests.
    pub shutdown_timeout_secs: u64,
    /// Per-probe timeout of `GET /health/ready`.
    pub readiness_timeout_ms: u64,
    /// Longest a request body may take to arrive (from the end of its headers): a body
    /// that drips in slower answers 408 `REQUEST_TIMEOUT` instead of holding a worker.
    pub body_timeout_ms: u64,
    /// Peers whose `X-Forwarded-For` is believed. A list, or one comma-separated string
    /// (`SECKILL_TRUSTED_PROXIES=127.0.0.1,::1,10.0.0.5`).
    #[serde(deserialize_with = "ip_list")]
    pub trusted_proxies: Vec<IpAddr>,
    /// Folder of the web pages served at `/` (the shopper page, `/admin/`).
    pub static_dir: String,
    /// A folder of envoyproxy/ratelimit YAML files (`*.yaml`, `*.yml`, one domain each,
    /// at most `edge::domain_files::MAX_FILES`): at start each seeds its domain where
    /// none is stored (Postgres is the truth from then on); a file that does not parse
    /// fails the start. `None` (or empty): no files.
    pub rls_config_dir: Option<String>,
    /// Most distinct counter keys one edge domain holds at once, across instances
    /// (`edge::key_registry`): a request with a new key beyond it is refused.
    pub rls_max_keys: u64,
    /// Port of the NGINX gate's decision endpoint (`GET /decide`, `http::gate`): a
    /// listener of its own on `host`, never the service's port, so no NGINX location
    /// that proxies client traffic reaches it. `None`: no gate; 0 picks a free one.
    pub gate_port: Option<u16>,
    /// The secret NGINX's internal location sends in `X-Gate-Secret`; required when
    /// `gate_port` is set (the start fails without it).
    pub gate_secret: SecretString,
    /// Port of Envoy's rate-limit gRPC service (`grpc`, on `host`, on a runtime of its
    /// own). It has no authentication: never publish it past the gateway's network.
    /// `None`: no gRPC server; 0 picks a free one (tests).
    pub rls_port: Option<u16>,

    // Redis.
    /// The Redis server (or, under Sentinel, the master's credentials and database). A
    /// secret: it may carry a password.
    pub redis_url: SecretString,
    /// A Redis Cluster to use instead of `redis_url`: its nodes' URLs, comma-separated
    /// (any subset that is up will do; the others are found). Empty: one server.
    pub redis_cluster_nodes: SecretString,
    /// Redis Sentinels to ask where the master is, instead of `redis_url`'s address:
    /// their URLs, comma-separated (any one that answers will do). The master is then
    /// reached with `redis_url`'s password and database, and found again after a
    /// failover. Empty: no Sentinel. Not together with `redis_cluster_nodes`.
    pub redis_sentinels: SecretString,
    /// The name the sentinels monitor the master under (`sentinel monitor <name> …`).
    pub redis_sentinel_master: String,
    /// Every Redis key this instance writes starts with this, so several deployments
    /// (or parallel tests) can share one Redis without seeing each other.
    pub redis_key_prefix: String,
    /// Timeout of each sale Redis call (reservation, pipeline, repair).
    pub redis_timeout_ms: u64,

    // Postgres.
    /// The Postgres database. A secret: it may carry a password.
    pub database_url: SecretString,
    /// Most connections of the main pool (order commits have a pool of their own).
    pub database_max_connections: u32,
    /// Kept short on purpose: a request waiting for a connection longer than this
    /// fails cleanly instead of outliving the client's own timeout.
    pub database_acquire_timeout_ms: u64,
    /// Connections reserved for order commits, so that reads, however many, can never
    /// push a commit into the acquire timeout: shared out over the worker threads, whose
    /// committers each open their share (at least one) on their own thread.
    pub database_commit_connections: u32,
    /// Server-side `statement_timeout` of the app's sessions: a statement the app gave up
    /// on (see `order_commit_timeout_ms`) cannot go on running, holding an item's row
    /// lock, for longer than this.
    pub database_statement_timeout_ms: u64,
    /// Server-side `idle_in_transaction_session_timeout`: a transaction whose client went
    /// away between statements is aborted after this, not left holding locks.
    pub database_idle_in_transaction_timeout_ms: u64,

    // Logging.
    /// `tracing` filter directive, e.g. `info` or `seckill=debug,info`.
    pub log_level: String,
    /// `pretty` or `json`; `None`: by the environment.
    pub log_format: Option<LogFormat>,

    // Identity: shoppers' tokens and the admin token.
    /// Signs and checks shoppers' tokens (HS256).
    pub jwt_secret: SecretString,
    /// The waiting room's key for its tickets and passes: never the shopper-token
    /// secret (production refuses the same value, the local default and a short one).
    pub queue_secret: SecretString,
    /// Lifetime of the tokens the dev login issues.
    pub token_ttl_secs: u64,
    /// The longest validity an accepted shopper token may have: `exp` at most this far
    /// from now (and from `iat`, when the token has one), whoever signed it.
    pub token_max_lifetime_secs: u64,
    /// When set, a shopper token must carry this `iss` (the dev login writes it).
    pub token_issuer: String,
    /// When set, a shopper token must carry this `aud` (the dev login writes it); when
    /// empty, a token carrying any `aud` is refused (it was minted for someone else).
    pub token_audience: String,
    /// `POST /api/session` hands out tokens for any user id: a development aid.
    /// `None` = on in `local`, off in `production`.
    pub dev_login: Option<bool>,
    /// Bearer token for `/admin/api/…`. Empty = admin endpoints closed.
    pub admin_token: SecretString,

    // Rate limiting.
    /// The engine's tunables and the policies, the app's own ([`policies`]) unless a
    /// settings file has a `[limiter.policies]` table, which replaces them whole.
    pub limiter: LimiterSettings,

    // The sale's memory.
    /// The decision stream, its fold into Postgres, the offenders and the blocks
    /// (docs/history.md).
    pub history: HistorySettings,

    // The sale: orders, reservations and their repair, idempotency.
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
    /// A waiting-room ticket's polls (`sale::room::poll_budget`): one refilled every
    /// this many ms (the page polls every 6 s)…
    pub queue_poll_every_ms: u64,
    /// …at most this many saved (a reload and several open tabs at once)…
    pub queue_poll_burst: u64,
    /// …in a table of at most this many tickets per instance (~100 bytes each).
    pub queue_poll_tickets: usize,
    /// How long a reservation may stay pending before the reconciler settles it from
    /// Postgres. Must exceed the longest an order transaction can live (see
    /// [`safety::timeouts`]), or live purchases would be undone.
    pub reservation_deadline_ms: u64,
    /// After each reservation, wait up to this long for a Redis replica to acknowledge
    /// it (`WAIT 1 <ms>`); 0 (the default) does not wait. See `deploy/README.md`.
    pub reservation_replica_wait_ms: u64,
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
    /// How long a shopper has to pay an order before it expires and its unit goes back.
    pub payment_deadline_secs: u64,
    /// Whether a shopper whose order was cancelled or expired may buy the item again.
    pub rebuy_after_release: bool,
    /// How often (one instance at a time) the expiry sweeper runs.
    pub expiry_sweep_interval_ms: u64,

    // Overload: load shedding and the orders breaker (`sale::overload`), per instance.
    /// Whether admitted purchases are held to a concurrency limit that follows their
    /// commits' latency; past it a purchase answers 503 `OVERLOADED` at once.
    pub shedding_enabled: bool,
    /// The limit at start-up, and its bounds. The maximum is far above what a healthy
    /// Postgres needs in flight (a busy sale: tens to a few hundred), so that normal
    /// load never meets it; the minimum is what a slow Postgres is still offered.
    pub shedding_initial_limit: u32,
    /// The least the shedding limit may fall to.
    pub shedding_min_limit: u32,
    /// The most it may grow to.
    pub shedding_max_limit: u32,
    /// How much of a slow window's verdict a decrease takes (Gradient2's smoothing).
    pub shedding_smoothing: f64,
    /// How much slower than their baseline commits may get before it counts as queueing.
    pub shedding_tolerance: f64,
    /// A sample window whose mean latency is under this never lowers the limit: group
    /// commit's latency rises with the load by design, and must not read as queueing.
    pub shedding_latency_floor_ms: u64,
    /// The shortest sample window (each also needs ten purchases).
    pub shedding_window_ms: u64,
    /// Order commits in a row that failed or timed out before the breaker opens (then
    /// purchases answer 503 `ORDERS_UNAVAILABLE` before their reservation); 0: never.
    pub orders_breaker_failures: u32,
    /// How long the breaker stays open before one purchase probes Postgres.
    pub orders_breaker_open_ms: u64,
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

/// The URLs of a comma-separated list, blanks dropped.
fn url_list(list: &SecretString) -> Vec<SecretString> {
    list.expose_secret()
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(SecretString::from)
        .collect()
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            environment: Environment::Local,
            commit: "unknown".into(),
            host: "127.0.0.1".into(),
            port: 8080,
            workers: None,
            max_connections: 4_096,
            max_connections_awaiting_head: 3_584,
            max_connections_per_address: 64,
            listen_backlog: 1_024,
            head_timeout_ms: 5_000,
            probe_port: 8_089,
            shutdown_timeout_secs: 10,
            readiness_timeout_ms: 500,
            body_timeout_ms: 5_000,
            trusted_proxies: vec![
                IpAddr::from([127, 0, 0, 1]),
                IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            ],
            static_dir: "static".into(),
            rls_config_dir: None,
            rls_max_keys: 100_000,
            gate_port: None,
            gate_secret: SecretString::from(""),
            rls_port: None,

            redis_url: SecretString::from("redis://127.0.0.1:6380"),
            redis_cluster_nodes: SecretString::from(""),
            redis_sentinels: SecretString::from(""),
            redis_sentinel_master: "seckill".into(),
            redis_key_prefix: "seckill".into(),
            redis_timeout_ms: 500,

            database_url: SecretString::from("postgres://postgres@127.0.0.1:5433/seckill"),
            database_max_connections: 20,
            database_acquire_timeout_ms: 2_000,
            database_commit_connections: 8,
            database_statement_timeout_ms: 5_000,
            database_idle_in_transaction_timeout_ms: 5_000,

            log_level: "info".into(),
            log_format: None,

            jwt_secret: SecretString::from(LOCAL_JWT_SECRET),
            queue_secret: SecretString::from(LOCAL_QUEUE_SECRET),
            token_ttl_secs: 3_600,
            token_max_lifetime_secs: 86_400,
            token_issuer: String::new(),
            token_audience: String::new(),
            dev_login: None,
            admin_token: SecretString::from(""),

            limiter: policies::limiter_settings(),
            history: HistorySettings::default(),

            order_commit_timeout_ms: 5_000,
            commit_batch_max: 256,
            commit_linger_ms: 0,
            seed_demo_item: false,
            queue_poll_every_ms: 1_000,
            queue_poll_burst: 20,
            queue_poll_tickets: 100_000,
            reservation_deadline_ms: 30_000,
            reservation_replica_wait_ms: 0,
            reconcile_interval_ms: 10_000,
            idempotency_ttl_secs: 86_400,
            idempotency_max_in_flight: 4,
            consistency_interval_secs: 15,
            payment_deadline_secs: 900,
            rebuy_after_release: true,
            expiry_sweep_interval_ms: 1_000,

            shedding_enabled: true,
            shedding_initial_limit: 1_000,
            shedding_min_limit: 20,
            shedding_max_limit: 1_000,
            shedding_smoothing: 0.2,
            shedding_tolerance: 1.5,
            shedding_latency_floor_ms: 50,
            shedding_window_ms: 100,
            orders_breaker_failures: 20,
            orders_breaker_open_ms: 1_000,
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
        let config = builder.build().context("reading settings")?;
        // Without a `[limiter.policies]` table of its own, a `[limiter]` section (or a
        // `SECKILL_LIMITER__…` variable) keeps the app's policies, as if only the given
        // keys had been written over the defaults.
        let policies_given = config
            .get::<serde::de::IgnoredAny>("limiter.policies")
            .is_ok();
        let mut settings: Self = config.try_deserialize().context("settings are invalid")?;
        if !policies_given {
            settings.limiter.policies = policies::defaults();
        }
        Ok(settings)
    }

    /// Whether `POST /api/session` hands out tokens (see `dev_login`).
    pub fn dev_login_enabled(&self) -> bool {
        self.dev_login
            .unwrap_or(self.environment == Environment::Local)
    }

    /// The cluster's node URLs; empty when the app uses one server.
    pub fn redis_cluster_nodes(&self) -> Vec<SecretString> {
        url_list(&self.redis_cluster_nodes)
    }

    /// The sentinels' URLs; empty when the app does not use Sentinel.
    pub fn redis_sentinels(&self) -> Vec<SecretString> {
        url_list(&self.redis_sentinels)
    }

    /// The log format in force: the setting, or the environment's default.
    pub fn log_format(&self) -> LogFormat {
        self.log_format.unwrap_or(match self.environment {
            Environment::Local => LogFormat::Pretty,
            Environment::Production => LogFormat::Json,
        })
    }

    /// The service's worker threads: [`Self::workers`], or one per core (actix's own
    /// default, resolved here), at most 512.
    pub fn worker_threads(&self) -> usize {
        self.workers
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, NonZeroUsize::get))
            .clamp(1, 512)
    }

    /// Postgres sessions of each worker thread's committer: the commit connections
    /// shared out over the workers, rounded up, at least one.
    pub fn sessions_per_committer(&self) -> usize {
        (self.database_commit_connections as usize)
            .div_ceil(self.worker_threads())
            .max(1)
    }

    /// [`Self::database_acquire_timeout_ms`] as a `Duration`.
    pub fn database_acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.database_acquire_timeout_ms)
    }

    /// [`Self::readiness_timeout_ms`] as a `Duration`.
    pub fn readiness_timeout(&self) -> Duration {
        Duration::from_millis(self.readiness_timeout_ms)
    }

    /// Refuses a configured policy that its callers cannot support: a `per_item` scope
    /// every check of its policy would answer with a 500, a shaper composed with a
    /// reservation, a `user` rule where nobody signs in; rewrites to `ip`, with a
    /// warning, a rule on another source its routes do not supply, as it counted before
    /// (see `policies::settle`).
    pub fn settle_policies(&mut self) -> Result<(), policies::NotAllowed> {
        policies::settle(&mut self.limiter.policies)
    }

    /// The policies the rules table is seeded with (see `policies::seeds`).
    pub fn seed_policies(
        &self,
    ) -> std::collections::BTreeMap<String, crate::limiter::policy::PolicyConfig> {
        policies::seeds(&self.limiter.policies)
    }

    /// Whether `/admin/api/…` is served: an admin token is set.
    pub fn admin_endpoints_open(&self) -> bool {
        !self.admin_token.expose_secret().is_empty()
    }
}
