//! Rules as data.
//!
//! A **rule** is one dimension (`api`, `user`, `ip`, …): where its key comes from, its
//! limits, and the message a refused caller reads. A **policy** is an ordered list of
//! rules decided together by one algorithm in one script call. Which policies exist is
//! the application's to say (its settings hand them over in [`LimiterSettings`]); they are
//! checked once here, and then trusted by the rest of the limiter.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use super::clock::ClockSource;
pub use super::keys::{KeySource, Scope};
/// Spelled with the other shared words, which the limiter's observed mode derives from.
pub use crate::vocabulary::FailMode;

/// How a policy's rules count. Each is one script in `lua/` with the same contract (see
/// `backend`); `docs/limiting.md` compares them on one trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// The exact sliding-window log: one sorted-set entry per admitted request.
    SlidingWindow,
    /// Tokens refilled continuously up to a capacity: a burst, then the rate.
    TokenBucket,
    /// One counter per aligned window (envoy's ratelimit): cheapest, and up to twice
    /// the threshold across a window edge.
    FixedWindow,
    /// The current and previous windows' counts, weighted by the elapsed fraction
    /// (Cloudflare's approximation of the sliding window).
    SlidingWindowCounter,
    /// The token bucket used as a meter: one timestamp per key (redis-cell, governor).
    Gcra,
    /// A shaper: requests leave at a constant rate, an admitted one waits for its slot
    /// (at most the rule's `max_delay_ms`). Never for a policy whose admission is
    /// followed by a reservation in the same call (`configuration::policies`).
    LeakyBucket,
}

impl Algorithm {
    /// Every algorithm, in the order of their discriminants (`quota_headers` is indexed by
    /// them).
    pub const ALL: [Algorithm; 6] = [
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindowCounter,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
    ];

    /// The word settings, the API and the pages spell the algorithm with.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SlidingWindow => "sliding_window",
            Self::TokenBucket => "token_bucket",
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindowCounter => "sliding_window_counter",
            Self::Gcra => "gcra",
            Self::LeakyBucket => "leaky_bucket",
        }
    }

    /// Whether an admission may ask the caller to wait for a departure slot.
    pub fn shapes(self) -> bool {
        self == Self::LeakyBucket
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

/// A rule as written in settings. Token-bucket (and GCRA) parameters default to the
/// window ones: capacity = threshold, refilled by `threshold` tokens per window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleConfig {
    /// The rule's name within its policy: part of its Redis keys and of `RateLimit-Policy`.
    pub name: String,
    /// Where each request's key value comes from.
    pub key: KeySource,
    /// The window's length, in milliseconds (window algorithms; the token bucket's default
    /// refill period).
    pub window_ms: u64,
    /// Requests admitted per window and key (the token bucket's default capacity).
    pub threshold: u64,
    /// Token-bucket and GCRA burst size; the threshold when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// Tokens added per `refill_ms`; the threshold when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_tokens: Option<u64>,
    /// The refill period, in milliseconds; the window when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refill_ms: Option<u64>,
    /// The leaky bucket's longest wait for a departure slot; [`DEFAULT_MAX_DELAY_MS`]
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
    /// A shadow rule counts and reports what it would refuse, and never refuses.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// What a refused caller reads (1-200 printable characters).
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
            max_delay_ms: None,
            shadow: false,
            message: message.into(),
        }
    }
}

/// The leaky bucket's longest wait for a slot when a rule does not say.
pub const DEFAULT_MAX_DELAY_MS: u64 = 1_000;
/// The longest a shaped answer may be held: a held request keeps a connection open.
pub const MAX_DELAY_MS: u64 = 60_000;

/// A policy as written in settings or stored in Postgres, before [`Policy::parse`] checks
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyConfig {
    /// How its rules count.
    pub algorithm: Algorithm,
    /// What the limiter does when Redis cannot answer; `open` when absent.
    #[serde(default)]
    pub fail_mode: FailMode,
    /// A disabled policy admits everything without asking Redis (an operator's switch,
    /// and the "no limiting" baseline of the benchmark).
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    /// Where its keys live (see `limiter::keys`); absent in configurations and stored
    /// rows older than scopes, which all meant `global`.
    #[serde(default)]
    pub scope: Scope,
    /// Its rules, in the order their keys are decided.
    pub rules: Vec<RuleConfig>,
}

fn enabled_by_default() -> bool {
    true
}

/// The engine's settings: its tunables and the policies it starts with.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct LimiterSettings {
    /// Longest a request waits for a decision before the policy's fail mode applies.
    pub timeout_ms: u64,
    /// Whose clock the scripts read: Redis's `TIME`, or this instance's.
    pub clock: ClockSource,
    /// Slots of the denial cache (see `limiter::denial`): refusals answered again
    /// without Redis until they expire. 0 turns it off. Memory is bounded by the slots
    /// (each holds one key of at most ~200 bytes).
    pub denial_cache_slots: usize,
    /// The policies in force at start, by name.
    pub policies: BTreeMap<String, PolicyConfig>,
    /// Keys the fallback limits (fail mode `local`) may hold at once in each policy's
    /// table: about 100 bytes each besides the key (see `limiter::fallback_limits`).
    pub fallback_keys: usize,
    /// How often this instance beats into Redis, so the fallback limits know how many
    /// instances share each threshold.
    pub heartbeat_ms: u64,
    /// The fewest instances the fallback limits assume share each threshold: set it to
    /// the fleet's size. An instance that has not counted its peers yet (Redis went
    /// before its first beat was answered) or counts fewer takes at most a threshold
    /// over this, so its share stays within the bound docs/limiter.md writes down.
    pub fleet_floor: u64,
}

impl Default for LimiterSettings {
    /// The engine's defaults, and no policy: which policies there are is the
    /// application's to say.
    fn default() -> Self {
        Self {
            timeout_ms: 250,
            clock: ClockSource::Redis,
            denial_cache_slots: 16_384,
            policies: BTreeMap::new(),
            fallback_keys: 100_000,
            heartbeat_ms: 1_000,
            fleet_floor: 1,
        }
    }
}

/// Most rules one policy may have: each is a key in one script call (the dashboard's
/// `MAX_RULES` too, held to this by `tests/docs.rs`).
pub const MAX_RULES: usize = 8;

/// A checked rule: names are key-safe, every limit is positive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Key-safe name within its policy (see [`RuleConfig::name`]).
    pub name: String,
    /// Where each request's key value comes from.
    pub key: KeySource,
    /// Window length, in milliseconds.
    pub window_ms: u64,
    /// Requests admitted per window and key.
    pub threshold: u64,
    /// Token-bucket and GCRA burst size (defaulted to the threshold).
    pub capacity: u64,
    /// Tokens added per `refill_ms` (defaulted to the threshold).
    pub refill_tokens: u64,
    /// Refill period, in milliseconds (defaulted to the window).
    pub refill_ms: u64,
    /// The leaky bucket's longest wait for a slot, in milliseconds, at most
    /// [`MAX_DELAY_MS`].
    pub max_delay_ms: u64,
    /// Counts and reports, never refuses (sorted after the enforced rules).
    pub shadow: bool,
    /// What a refused caller reads.
    pub message: String,
}

impl Rule {
    /// The quota and its window in seconds, as announced in `RateLimit-Policy`.
    pub fn quota(&self, algorithm: Algorithm) -> (u64, u64) {
        match algorithm {
            Algorithm::SlidingWindow
            | Algorithm::FixedWindow
            | Algorithm::SlidingWindowCounter
            | Algorithm::LeakyBucket => (self.threshold, self.window_ms.div_ceil(1000)),
            // Time to refill an empty bucket completely.
            Algorithm::TokenBucket | Algorithm::Gcra => (
                self.capacity,
                (self.capacity * self.refill_ms).div_ceil(self.refill_tokens * 1000),
            ),
        }
    }
}

/// A checked policy: what [`Limiter`](super::Limiter) decides a request against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Its name: the key of the settings' map, part of every Redis key it makes.
    pub name: String,
    /// How its rules count.
    pub algorithm: Algorithm,
    /// What a request meets when Redis cannot answer.
    pub fail_mode: FailMode,
    /// `false` admits everything without asking Redis.
    pub enabled: bool,
    /// Where its keys live: one shared set, or one per item (see `limiter::keys`).
    pub scope: Scope,
    /// The enforced rules, then the shadow ones (each group in the settings' order).
    pub rules: Vec<Rule>,
    /// How many of `rules` are enforced: the first `enforced`.
    pub enforced: usize,
    /// The `RateLimit-Policy` value for each algorithm (indexed by `Algorithm as
    /// usize`): constant per policy, so built once here instead of per response.
    quota_headers: [String; Algorithm::ALL.len()],
}

/// Why a policy was refused: each names the policy or rule at fault, and the message is
/// what an operator reads in the 400 or at start-up.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    /// The policy's name is not key-safe.
    #[error("policy name {0:?} must be 1-32 characters of a-z 0-9 _ -")]
    BadPolicyName(String),
    /// Too few or too many rules (names the policy).
    #[error("policy {0:?} needs 1 to {MAX_RULES} rules, shadow rules included")]
    RuleCount(String),
    /// Every rule is a shadow rule, so nothing would be limited (names the policy).
    #[error("policy {0:?} needs at least one rule that is not a shadow rule")]
    AllShadow(String),
    /// `max_delay_ms` over [`MAX_DELAY_MS`] (names the rule).
    #[error("rule {0:?}: maxDelayMs must be 0 to {MAX_DELAY_MS}")]
    BadMaxDelay(String),
    /// A rule's name is not key-safe.
    #[error("rule name {0:?} must be 1-32 characters of a-z 0-9 _ -")]
    BadRuleName(String),
    /// Two rules share a name, and so a Redis key.
    #[error("policy {policy:?} has two rules named {rule:?}")]
    DuplicateRule {
        /// The policy holding both.
        policy: String,
        /// The name they share.
        rule: String,
    },
    /// A limit is 0.
    #[error("rule {rule:?}: {field} must be a whole number, 1 or more")]
    NotPositive {
        /// The rule at fault.
        rule: String,
        /// The limit, in the API's spelling (`windowMs`, `threshold`, …).
        field: &'static str,
    },
    /// A limit, or its product with the rule's period, would lose precision in the scripts'
    /// doubles.
    #[error("rule {rule:?}: {field} is too large (at most 2^50, and so is its product with the rule's period)")]
    TooLarge {
        /// The rule at fault.
        rule: String,
        /// The limit, in the API's spelling.
        field: &'static str,
    },
    /// A literal key is not key-safe (names the rule).
    #[error("rule {0:?}: a literal key must be 1-64 characters of A-Z a-z 0-9 . _ : -")]
    BadLiteral(String),
    /// The message is empty, too long or has a control character (names the rule).
    #[error("rule {0:?}: the fallback message must be 1-200 characters, none of them a control character")]
    BadMessage(String),
}

/// A policy's or a rule's name: 1-32 characters of a-z 0-9 _ -.
pub fn is_name(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Upper bound on every time and count: keeps the scripts' arithmetic exact in doubles.
const MAX_VALUE: u64 = 1 << 50;

impl Policy {
    /// Checks a policy from settings or storage, fills the defaults, and puts shadow rules
    /// last.
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
            if rc.message.trim().is_empty()
                || rc.message.chars().count() > 200
                || !crate::domain::is_printable(&rc.message)
            {
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
                max_delay_ms: rc.max_delay_ms.unwrap_or(DEFAULT_MAX_DELAY_MS),
                shadow: rc.shadow,
                message: rc.message.clone(),
            };
            if rule.max_delay_ms > MAX_DELAY_MS {
                return Err(PolicyError::BadMaxDelay(rule.name));
            }
            for (field, value) in [
                ("windowMs", rule.window_ms),
                ("threshold", rule.threshold),
                ("capacity", rule.capacity),
                ("refillTokens", rule.refill_tokens),
                ("refillMs", rule.refill_ms),
            ] {
                if value == 0 {
                    return Err(PolicyError::NotPositive {
                        rule: rule.name,
                        field,
                    });
                }
                // The scripts' products: a bucket's level (capacity × refill period), the
                // counter's weighted counts (threshold × window) and the shaper's slots
                // (threshold × (window + longest wait)) stay exact in doubles.
                let window_span = rule.window_ms.saturating_add(rule.max_delay_ms);
                if value > MAX_VALUE
                    || (field == "capacity" && value.saturating_mul(rule.refill_ms) > MAX_VALUE)
                    || (field == "threshold" && value.saturating_mul(window_span) > MAX_VALUE)
                {
                    return Err(PolicyError::TooLarge {
                        rule: rule.name,
                        field,
                    });
                }
            }
            rules.push(rule);
        }
        // Shadow rules last: the scripts decide the first `enforced` and only then
        // consult the others (see `backend`).
        rules.sort_by_key(|rule| rule.shadow);
        let enforced = rules.iter().filter(|rule| !rule.shadow).count();
        if enforced == 0 {
            return Err(PolicyError::AllShadow(name.into()));
        }
        Ok(Self {
            name: name.into(),
            algorithm: config.algorithm,
            fail_mode: config.fail_mode,
            enabled: config.enabled,
            scope: config.scope,
            quota_headers: Algorithm::ALL
                .map(|algorithm| quota_header(&rules[..enforced], algorithm)),
            rules,
            enforced,
        })
    }

    /// `RateLimit-Policy` (IETF draft 12) for this policy under `algorithm`: one named
    /// quota per enforced rule (a shadow rule is not a quota), e.g. `"api";q=1000;w=1, "user";q=3;w=60`.
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
    /// Checks every policy; the first refused one fails the whole set, so a bad edit
    /// changes nothing.
    pub fn parse(configs: &BTreeMap<String, PolicyConfig>) -> Result<Self, PolicyError> {
        configs
            .iter()
            .map(|(name, config)| Policy::parse(name, config).map(|p| (name.clone(), p.into())))
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// The policy a route names, if it exists.
    pub fn get(&self, name: &str) -> Option<&std::sync::Arc<Policy>> {
        self.0.get(name)
    }

    /// Every policy, by name.
    pub fn iter(&self) -> impl Iterator<Item = &std::sync::Arc<Policy>> {
        self.0.values()
    }
}
