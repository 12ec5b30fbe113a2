//! The app's rate-limit policies: their names, which the routes, the sale and the admin
//! sign-in check by, and their defaults (rules, limits, the messages a refused shopper
//! reads).
//!
//! The limiter engine enforces whatever policies it is given and knows none of these;
//! [`LimiterSettings`] holds the engine's tunables and defaults to no policy. The app's
//! settings start from [`limiter_settings`], and a settings file's `[limiter.policies]`
//! table replaces [`defaults`] whole (see [`Settings::load`]).

use std::collections::BTreeMap;

use super::Settings;
use crate::limiter::policy::{
    Algorithm, FailMode, KeySource, LimiterSettings, PolicyConfig, RuleConfig,
};

/// The policy guarding `POST /seckill`.
pub const SECKILL_POLICY: &str = "seckill";
/// Failed admin sign-ins per client IP: its first rule's threshold is how many refused
/// admin tokens lock an address out, its window for how long (see
/// `identity::lockout`); disabling the policy disables the lockout.
pub const ADMIN_AUTH_POLICY: &str = "admin_auth";
/// The `admin_auth` defaults, also the lockout's when a deployment's settings leave the
/// policy out: 10 refused tokens lock an address out for 5 minutes.
pub const ADMIN_AUTH_FAILURES: u64 = 10;
pub const ADMIN_AUTH_WINDOW_MS: u64 = 300_000;
/// The shopper's reads (`GET /api/orders/mine`): per user and per IP, fail-open, well
/// above the shop page's polling every 2 s (30 a minute), so reads can never crowd out
/// the sale's work in Postgres.
pub const ORDERS_READ_POLICY: &str = "orders_read";
/// The policy of the limiter-as-a-service endpoint `GET /api/limited`.
pub const LIMITED_POLICY: &str = "limited";

/// The engine's own defaults with the app's policies.
pub fn limiter_settings() -> LimiterSettings {
    LimiterSettings {
        policies: defaults(),
        ..LimiterSettings::default()
    }
}

/// The app's policies as they are unless configured otherwise.
pub fn defaults() -> BTreeMap<String, PolicyConfig> {
    let rule = RuleConfig::new;
    let mut policies = BTreeMap::new();
    policies.insert(
        SECKILL_POLICY.into(),
        PolicyConfig {
            algorithm: Algorithm::SlidingWindow,
            fail_mode: FailMode::Closed,
            enabled: true,
            rules: vec![
                rule(
                    "api",
                    KeySource::Literal("purchase".into()),
                    1_000,
                    1_000,
                    "System busy, please try again later",
                ),
                rule(
                    "user",
                    KeySource::User,
                    60_000,
                    3,
                    "No duplicate submissions",
                ),
                rule(
                    "ip",
                    KeySource::Ip,
                    60_000,
                    5,
                    "Too frequent, please slow down",
                ),
            ],
        },
    );
    policies.insert(
        LIMITED_POLICY.into(),
        PolicyConfig {
            algorithm: Algorithm::SlidingWindow,
            fail_mode: FailMode::Open,
            enabled: true,
            rules: vec![rule(
                "client",
                KeySource::ClientId,
                60_000,
                100,
                "Rate limit exceeded, slow down",
            )],
        },
    );
    policies.insert(
        ADMIN_AUTH_POLICY.into(),
        PolicyConfig {
            algorithm: Algorithm::SlidingWindow,
            fail_mode: FailMode::Open,
            enabled: true,
            rules: vec![rule(
                "ip",
                KeySource::Ip,
                ADMIN_AUTH_WINDOW_MS,
                ADMIN_AUTH_FAILURES,
                "Too many failed sign-ins, try again later",
            )],
        },
    );
    policies.insert(
        ORDERS_READ_POLICY.into(),
        PolicyConfig {
            // O(1) state per key (a sliding window would keep one entry per read),
            // and a burst for a page that opens, then the polling rate.
            algorithm: Algorithm::TokenBucket,
            fail_mode: FailMode::Open,
            enabled: true,
            rules: vec![
                rule(
                    "user",
                    KeySource::User,
                    60_000,
                    120,
                    "Too many order lookups, please slow down",
                ),
                rule(
                    "ip",
                    KeySource::Ip,
                    60_000,
                    600,
                    "Too many order lookups from this address, please slow down",
                ),
            ],
        },
    );
    policies
}

impl Settings {
    /// The policies the rules table is seeded with: the configured ones, plus the
    /// default of each policy the app's own routes use that the configuration leaves
    /// out. A settings file's `[limiter.policies]` replaces the defaults whole, and a
    /// route whose policy is missing could only answer 500.
    pub fn seed_policies(&self) -> BTreeMap<String, PolicyConfig> {
        let mut seeds = self.limiter.policies.clone();
        for (name, default) in defaults() {
            seeds.entry(name).or_insert(default);
        }
        seeds
    }
}
