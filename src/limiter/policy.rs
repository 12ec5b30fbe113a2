//! Rules as data.
//!
//! A **rule** is one dimension (`api`, `user`, `ip`, …): where its key comes from, its
//! limits, and the message a refused caller reads. A **policy** is an ordered list of
//! rules decided together by one algorithm in one script call. Policies are loaded from
//! settings, checked once here, and then trusted by the rest of the limiter.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    SlidingWindow,
    TokenBucket,
}

impl Algorithm {
    pub const ALL: [Algorithm; 2] = [Algorithm::SlidingWindow, Algorithm::TokenBucket];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::SlidingWindow => "sliding_window",
            Self::TokenBucket => "token_bucket",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        Self::ALL.into_iter().find(|a| a.as_str() == s).ok_or(())
    }
}

/// What the limiter does when it cannot ask Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// Let the request through, count it, log it (once per burst). For routes where an
    /// outage of the limiter must not become an outage of the service.
    #[default]
    Open,
    /// Refuse with 503 `LIMITER_UNAVAILABLE`. For routes that cannot work without
    /// Redis anyway (the sale).
    Closed,
}

/// Where a rule's key value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// One shared key: the whole endpoint, across all instances.
    Literal(String),
    /// The authenticated user id.
    User,
    /// The client IP (see `web::client_ip` for whom we believe).
    Ip,
    /// `X-Client-Id`, falling back to the client IP.
    ClientId,
    /// The matched route pattern.
    Route,
}

/// A rule as written in settings. Token-bucket parameters default to the window ones:
/// capacity = threshold, refilled by `threshold` tokens per window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleConfig {
    pub name: String,
    pub key: KeySource,
    pub window_ms: u64,
    pub threshold: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_ms: Option<u64>,
    pub message: String,
}

impl RuleConfig {
    /// A window rule; token-bucket parameters follow from it.
    pub fn new(name: &str, key: KeySource, window_ms: u64, threshold: u64, message: &str) -> Self {
        Self {
            name: name.into(),
            key,
            window_ms,
            threshold,
            capacity: None,
            refill_tokens: None,
            refill_ms: None,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyConfig {
    pub algorithm: Algorithm,
    #[serde(default)]
    pub fail_mode: FailMode,
    /// A disabled policy admits everything without asking Redis (an operator's switch,
    /// and the "no limiting" baseline of the benchmark).
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    pub rules: Vec<RuleConfig>,
}

fn enabled_by_default() -> bool {
    true
}

/// Where the scripts get "now" from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClockSource {
    /// Redis `TIME` inside the script: every instance agrees, whatever its own clock.
    Redis,
    /// The app's clock, passed in ARGV: for managed Redis services that refuse `TIME`
    /// in scripts. Skewed instances then disagree at window edges.
    App,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct LimiterSettings {
    /// Longest a request waits for a decision before the policy's fail mode applies.
    pub timeout_ms: u64,
    pub clock: ClockSource,
    /// Slots of the denial cache (see `limiter::denial`): refusals answered again
    /// without Redis until they expire. 0 turns it off. Memory is bounded by the slots
    /// (each holds one key of at most ~200 bytes).
    pub denial_cache_slots: usize,
    /// A `[limiter.policies]` table in a settings file replaces these defaults whole.
    pub policies: BTreeMap<String, PolicyConfig>,
}

impl Default for LimiterSettings {
    fn default() -> Self {
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
        Self {
            timeout_ms: 250,
            clock: ClockSource::Redis,
            denial_cache_slots: 16_384,
            policies,
        }
    }
}

impl LimiterSettings {
    /// The policies the rules table is seeded with: the configured ones, plus the
    /// built-in default of each policy the app's own routes use that the configuration
    /// leaves out. A settings file's `[limiter.policies]` replaces the defaults whole,
    /// and a route whose policy is missing could only answer 500.
    pub fn seed_policies(&self) -> BTreeMap<String, PolicyConfig> {
        let mut seeds = self.policies.clone();
        for (name, default) in Self::default().policies {
            seeds.entry(name).or_insert(default);
        }
        seeds
    }
}

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

/// Most rules one policy may have: each is a key in one script call.
const MAX_RULES: usize = 8;

/// A checked rule: names are key-safe, every limit is positive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub key: KeySource,
    pub window_ms: u64,
    pub threshold: u64,
    pub capacity: u64,
    pub refill_tokens: u64,
    pub refill_ms: u64,
    pub message: String,
}

impl Rule {
    /// The quota and its window in seconds, as announced in `RateLimit-Policy`.
    pub fn quota(&self, algorithm: Algorithm) -> (u64, u64) {
        match algorithm {
            Algorithm::SlidingWindow => (self.threshold, self.window_ms.div_ceil(1000)),
            // Time to refill an empty bucket completely.
            Algorithm::TokenBucket => (
                self.capacity,
                (self.capacity * self.refill_ms).div_ceil(self.refill_tokens * 1000),
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub name: String,
    pub algorithm: Algorithm,
    pub fail_mode: FailMode,
    pub enabled: bool,
    pub rules: Vec<Rule>,
    /// The `RateLimit-Policy` value for each algorithm (indexed by `Algorithm as
    /// usize`): constant per policy, so built once here instead of per response.
    quota_headers: [String; Algorithm::ALL.len()],
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("policy name {0:?} must be 1-32 characters of a-z 0-9 _ -")]
    BadPolicyName(String),
    #[error("policy {0:?} needs 1 to {MAX_RULES} rules")]
    RuleCount(String),
    #[error("rule name {0:?} must be 1-32 characters of a-z 0-9 _ -")]
    BadRuleName(String),
    #[error("policy {policy:?} has two rules named {rule:?}")]
    DuplicateRule { policy: String, rule: String },
    #[error("rule {rule:?}: {field} must be a positive integer")]
    NotPositive { rule: String, field: &'static str },
    #[error("rule {rule:?}: {field} is too large")]
    TooLarge { rule: String, field: &'static str },
    #[error("rule {0:?}: a literal key must be 1-64 characters of A-Z a-z 0-9 . _ : -")]
    BadLiteral(String),
    #[error("rule {0:?}: the fallback message must be 1-200 characters")]
    BadMessage(String),
}

fn is_name(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Upper bound on every time and count: keeps the scripts' arithmetic exact in doubles.
const MAX_VALUE: u64 = 1 << 50;

impl Policy {
    pub fn parse(name: &str, config: &PolicyConfig) -> Result<Self, PolicyError> {
        if !is_name(name) {
            return Err(PolicyError::BadPolicyName(name.into()));
        }
        if config.rules.is_empty() || config.rules.len() > MAX_RULES {
            return Err(PolicyError::RuleCount(name.into()));
        }
        let mut rules = Vec::with_capacity(config.rules.len());
        for rc in &config.rules {
            if !is_name(&rc.name) {
                return Err(PolicyError::BadRuleName(rc.name.clone()));
            }
            if rules.iter().any(|r: &Rule| r.name == rc.name) {
                return Err(PolicyError::DuplicateRule {
                    policy: name.into(),
                    rule: rc.name.clone(),
                });
            }
            if let KeySource::Literal(value) = &rc.key {
                if crate::domain::ClientId::parse(value).is_err() {
                    return Err(PolicyError::BadLiteral(rc.name.clone()));
                }
            }
            if rc.message.trim().is_empty() || rc.message.chars().count() > 200 {
                return Err(PolicyError::BadMessage(rc.name.clone()));
            }
            let rule = Rule {
                name: rc.name.clone(),
                key: rc.key.clone(),
                window_ms: rc.window_ms,
                threshold: rc.threshold,
                capacity: rc.capacity.unwrap_or(rc.threshold),
                refill_tokens: rc.refill_tokens.unwrap_or(rc.threshold),
                refill_ms: rc.refill_ms.unwrap_or(rc.window_ms),
                message: rc.message.clone(),
            };
            for (field, value) in [
                ("window_ms", rule.window_ms),
                ("threshold", rule.threshold),
                ("capacity", rule.capacity),
                ("refill_tokens", rule.refill_tokens),
                ("refill_ms", rule.refill_ms),
            ] {
                if value == 0 {
                    return Err(PolicyError::NotPositive {
                        rule: rule.name,
                        field,
                    });
                }
                if value > MAX_VALUE
                    || (field == "capacity" && value.saturating_mul(rule.refill_ms) > MAX_VALUE)
                {
                    return Err(PolicyError::TooLarge {
                        rule: rule.name,
                        field,
                    });
                }
            }
            rules.push(rule);
        }
        Ok(Self {
            name: name.into(),
            algorithm: config.algorithm,
            fail_mode: config.fail_mode,
            enabled: config.enabled,
            quota_headers: Algorithm::ALL.map(|algorithm| quota_header(&rules, algorithm)),
            rules,
        })
    }

    /// `RateLimit-Policy` (IETF draft 12) for this policy under `algorithm`: one named
    /// quota per rule, e.g. `"api";q=1000;w=1, "user";q=3;w=60`.
    pub fn quota_header(&self, algorithm: Algorithm) -> &str {
        &self.quota_headers[algorithm as usize]
    }
}

fn quota_header(rules: &[Rule], algorithm: Algorithm) -> String {
    rules
        .iter()
        .map(|rule| {
            let (quota, window) = rule.quota(algorithm);
            format!("\"{}\";q={quota};w={window}", rule.name)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every policy of this deployment, by name. Replaced whole when rules change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicySet(BTreeMap<String, std::sync::Arc<Policy>>);

impl PolicySet {
    pub fn parse(configs: &BTreeMap<String, PolicyConfig>) -> Result<Self, PolicyError> {
        configs
            .iter()
            .map(|(name, config)| Policy::parse(name, config).map(|p| (name.clone(), p.into())))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub fn get(&self, name: &str) -> Option<&std::sync::Arc<Policy>> {
        self.0.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &std::sync::Arc<Policy>> {
        self.0.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policies_are_valid() {
        let set = PolicySet::parse(&LimiterSettings::default().policies).unwrap();
        let seckill = set.get(SECKILL_POLICY).unwrap();
        let names: Vec<_> = seckill.rules.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["api", "user", "ip"]);
        assert_eq!(seckill.fail_mode, FailMode::Closed);
        assert_eq!(set.get(LIMITED_POLICY).unwrap().fail_mode, FailMode::Open);
    }

    #[test]
    fn zero_windows_bad_names_and_duplicates_are_refused() {
        let mut config = LimiterSettings::default().policies[SECKILL_POLICY].clone();
        config.rules[1].window_ms = 0;
        assert_eq!(
            Policy::parse("seckill", &config),
            Err(PolicyError::NotPositive {
                rule: "user".into(),
                field: "window_ms"
            })
        );
        let mut config = LimiterSettings::default().policies[SECKILL_POLICY].clone();
        config.rules[2].name = "user".into();
        assert!(matches!(
            Policy::parse("seckill", &config),
            Err(PolicyError::DuplicateRule { .. })
        ));
        assert!(matches!(
            Policy::parse("Sec{kill}", &config),
            Err(PolicyError::BadPolicyName(_))
        ));
    }

    #[test]
    fn token_bucket_parameters_default_from_the_window() {
        let set = PolicySet::parse(&LimiterSettings::default().policies).unwrap();
        let rule = &set.get(LIMITED_POLICY).unwrap().rules[0];
        assert_eq!(
            (rule.capacity, rule.refill_tokens, rule.refill_ms),
            (100, 100, 60_000)
        );
        assert_eq!(rule.quota(Algorithm::TokenBucket), (100, 60));
        assert_eq!(rule.quota(Algorithm::SlidingWindow), (100, 60));
    }
}
