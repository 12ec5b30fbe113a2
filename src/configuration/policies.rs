//! The app's rate-limit policies: their names, which the routes, the sale and the admin
//! sign-in check by, and their defaults (rules, limits, the messages a refused shopper
//! reads).
//!
//! The limiter engine enforces whatever policies it is given and knows none of these;
//! [`LimiterSettings`] holds the engine's tunables and defaults to no policy. The app's
//! settings start from [`limiter_settings`], and a settings file's `[limiter.policies]`
//! table replaces [`defaults`] whole (see [`super::Settings::load`]); a policy the app uses
//! that the table leaves out is still seeded with its default (`seeds`).

use std::collections::BTreeMap;

use crate::limiter::policy::{
    Algorithm, FailMode, KeySource, LimiterSettings, PolicyConfig, RuleConfig, Scope,
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
/// The window of the `admin_auth` failures, and the lockout's length, in milliseconds.
pub const ADMIN_AUTH_WINDOW_MS: u64 = 300_000;
/// The shopper's reads (`GET /api/orders/mine`): per user and per IP, fail mode `local`, far
/// above what the shop page asks (after a purchase, when a payment deadline passes, on
/// a refresh; it polls the items, not the orders), so reads can never crowd out the
/// sale's work in Postgres.
pub const ORDERS_READ_POLICY: &str = "orders_read";
/// Joining a waiting room (`POST /api/items/{id}/queue`): per user and per IP,
/// fail-closed like the sale (without Redis there is no queue to join). A join is
/// answered once per user and item; the quota stops a script from hammering it.
pub const QUEUE_JOIN_POLICY: &str = "queue_join";
/// The policy of the limiter-as-a-service endpoint `GET /api/limited`.
pub const LIMITED_POLICY: &str = "limited";
/// `limited`'s admissions per address and minute, over all its client ids: ten clients
/// at their full rate behind one address. It bounds the keys one address can make.
pub const LIMITED_PER_ADDRESS: u64 = 1_000;
/// `limited`'s admissions per network (an IPv4 /24, an IPv6 /48) and minute: ten busy
/// addresses' worth.
pub const LIMITED_PER_NETWORK: u64 = 10_000;

/// The policies whose callers name a partition (`POST /seckill`: its item), and so the
/// only ones that may be `per_item`: any other policy's check could only fail.
const PARTITIONED: [&str; 1] = [SECKILL_POLICY];

/// A literal rule's source in [`KEY_SOURCES`] (its value is the rule's own).
const LITERAL: KeySource = KeySource::Literal(String::new());

/// The key sources each policy's routes supply (`http::rate_limit::caller` builds their
/// callers), and so the only ones its rules may key on: a rule on another source is
/// refused (the admin API's 400 names its `key`), never keyed on something else. The
/// sale, the orders and the queue have a signed-in user and no client id; `limited` is
/// open to anyone and has a client id (its address when it sends none); the admin
/// lockout's script counts per address whatever its rule says. A policy not listed here
/// is checked by no route (the engine's tests): any source.
pub const KEY_SOURCES: [(&str, &[KeySource]); 5] = [
    (
        SECKILL_POLICY,
        &[
            LITERAL,
            KeySource::User,
            KeySource::Ip,
            KeySource::Network,
            KeySource::Route,
        ],
    ),
    (
        ORDERS_READ_POLICY,
        &[
            LITERAL,
            KeySource::User,
            KeySource::Ip,
            KeySource::Network,
            KeySource::Route,
        ],
    ),
    (
        QUEUE_JOIN_POLICY,
        &[
            LITERAL,
            KeySource::User,
            KeySource::Ip,
            KeySource::Network,
            KeySource::Route,
        ],
    ),
    (
        LIMITED_POLICY,
        &[
            LITERAL,
            KeySource::ClientId,
            KeySource::Ip,
            KeySource::Network,
            KeySource::Route,
        ],
    ),
    (ADMIN_AUTH_POLICY, &[KeySource::Ip]),
];

/// The sources `policy`'s routes supply (see [`KEY_SOURCES`]); `None` for a policy no
/// route checks.
pub fn key_sources(policy: &str) -> Option<&'static [KeySource]> {
    KEY_SOURCES
        .iter()
        .find(|(name, _)| *name == policy)
        .map(|(_, sources)| *sources)
}

/// What a policy's callers cannot support, whatever the engine would accept.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotAllowed {
    /// `per_item` on a policy whose callers name no item: every check would fail.
    #[error("policy {0:?} cannot be per_item: its callers name no item (only {PARTITIONED:?} do)")]
    Scope(String),
    /// The shaper on a `per_item` policy: its admission is composed with the stock
    /// reservation in one script call, which cannot wait for a departure slot.
    #[error("policy {0:?} cannot use leaky_bucket while per_item: its admission reserves stock in the same script call, which cannot wait for a departure slot")]
    Shaper(String),
    /// A rule keyed on a source the policy's routes do not supply ([`KEY_SOURCES`]).
    #[error("policy {policy:?} cannot key a rule on {key}: its routes supply only {supplied}")]
    Key {
        /// The policy the rule was for.
        policy: String,
        /// The source's word (`client_id`).
        key: &'static str,
        /// The words of the sources its routes do supply, for the message.
        supplied: String,
    },
    /// The admin sign-in's script reads one rule: its rules are edited, never added or
    /// removed.
    #[error("policy {0:?} has exactly one rule, which its script reads: rules can be edited, not added or removed")]
    FixedRules(String),
}

/// Refuses `scope` for `policy` unless its callers can key it (see `PARTITIONED`),
/// and the shaper where the scope composes the admission with a reservation.
pub fn check_scope(policy: &str, scope: Scope, algorithm: Algorithm) -> Result<(), NotAllowed> {
    match scope {
        Scope::PerItem if !PARTITIONED.contains(&policy) => Err(NotAllowed::Scope(policy.into())),
        Scope::PerItem if algorithm.shapes() => Err(NotAllowed::Shaper(policy.into())),
        _ => Ok(()),
    }
}

/// Refuses a rule keyed on a source `policy`'s routes do not supply (see
/// [`KEY_SOURCES`]): such a rule could only fail every check, or count by something
/// its author did not write.
pub fn check_key(policy: &str, key: &KeySource) -> Result<(), NotAllowed> {
    let Some(supplied) = key_sources(policy) else {
        return Ok(());
    };
    if supplied.iter().any(|source| source.same_source(key)) {
        return Ok(());
    }
    let words: Vec<_> = supplied.iter().map(KeySource::as_str).collect();
    Err(NotAllowed::Key {
        policy: policy.into(),
        key: key.as_str(),
        supplied: words.join(", "),
    })
}

/// Whether rules may be added to or removed from `policy` (see
/// [`NotAllowed::FixedRules`]).
pub fn check_rule_set_change(policy: &str) -> Result<(), NotAllowed> {
    if policy == ADMIN_AUTH_POLICY {
        return Err(NotAllowed::FixedRules(policy.into()));
    }
    Ok(())
}

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
            scope: Scope::Global,
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
            fail_mode: FailMode::Local,
            enabled: true,
            scope: Scope::Global,
            rules: vec![
                rule(
                    "client",
                    KeySource::ClientId,
                    60_000,
                    100,
                    "Rate limit exceeded, slow down",
                ),
                // The keys one address can make: `X-Client-Id` is the caller's to choose,
                // and each admitted fresh id is a key for a window. Checked in the same
                // script call, so a refusal here writes no client's key
                // (docs/limiter.md, "The keys a client can make").
                rule(
                    "ip",
                    KeySource::Ip,
                    60_000,
                    LIMITED_PER_ADDRESS,
                    "Too many requests from this address, slow down",
                ),
                // An IPv6 client holds a /48 as easily as a /64 (65 536 addresses as we
                // key them): the same bound on its whole network.
                rule(
                    "network",
                    KeySource::Network,
                    60_000,
                    LIMITED_PER_NETWORK,
                    "Too many requests from this network, slow down",
                ),
            ],
        },
    );
    policies.insert(
        ADMIN_AUTH_POLICY.into(),
        PolicyConfig {
            algorithm: Algorithm::SlidingWindow,
            fail_mode: FailMode::Local,
            enabled: true,
            scope: Scope::Global,
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
            fail_mode: FailMode::Local,
            enabled: true,
            scope: Scope::Global,
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
    policies.insert(
        QUEUE_JOIN_POLICY.into(),
        PolicyConfig {
            algorithm: Algorithm::TokenBucket,
            fail_mode: FailMode::Closed,
            enabled: true,
            scope: Scope::Global,
            rules: vec![
                rule(
                    "user",
                    KeySource::User,
                    60_000,
                    10,
                    "Too many queue joins, please wait",
                ),
                rule(
                    "ip",
                    KeySource::Ip,
                    60_000,
                    60,
                    "Too many queue joins from this address, please wait",
                ),
            ],
        },
    );
    policies
}

/// Settles, at start-up, the configured policies against what their callers support:
/// refuses a scope they cannot key (see [`check_scope`]) and a `user` rule where no user
/// is signed in (refused before there was a key-source table: it never counted
/// anything); rewrites, with a warning, a rule on another source its routes do not
/// supply to `ip`, which is what such a rule counted by before this table existed (a
/// `client_id` rule fell back to the address, the admin lockout counts per address), so
/// an upgrade changes nothing live. The same rule stored in Postgres was rewritten by
/// the migration `20261204000002_unsupplied_key_sources.sql`; a settings file cannot be
/// migrated, so its copy is rewritten here at each start until its author fixes it.
pub(super) fn settle(configured: &mut BTreeMap<String, PolicyConfig>) -> Result<(), NotAllowed> {
    for (name, policy) in configured.iter_mut() {
        check_scope(name, policy.scope, policy.algorithm)?;
        for rule in &mut policy.rules {
            let Err(refused) = check_key(name, &rule.key) else {
                continue;
            };
            if rule.key == KeySource::User {
                return Err(refused);
            }
            tracing::warn!(
                policy = %name, rule = %rule.name, key = rule.key.as_str(),
                "a rule keyed on a source its policy's routes do not supply counts by ip, as it did: \
                 set its key to \"ip\" in the settings file"
            );
            rule.key = KeySource::Ip;
        }
    }
    Ok(())
}

/// The policies the rules table is seeded with: the configured ones, plus the
/// default of each policy the app's own routes use that the configuration leaves
/// out. A settings file's `[limiter.policies]` replaces the defaults whole, and a
/// route whose policy is missing could only answer 500.
pub(super) fn seeds(configured: &BTreeMap<String, PolicyConfig>) -> BTreeMap<String, PolicyConfig> {
    let mut seeds = configured.clone();
    for (name, default) in defaults() {
        seeds.entry(name).or_insert(default);
    }
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sale_may_be_per_item() {
        let mut policies = defaults();
        assert_eq!(settle(&mut policies), Ok(()));
        assert_eq!(
            policies,
            defaults(),
            "the defaults key only on what is supplied"
        );
        policies.get_mut(SECKILL_POLICY).expect("seckill").scope = Scope::PerItem;
        assert_eq!(settle(&mut policies), Ok(()));
        for name in [
            LIMITED_POLICY,
            ADMIN_AUTH_POLICY,
            ORDERS_READ_POLICY,
            QUEUE_JOIN_POLICY,
        ] {
            let mut policies = defaults();
            policies.get_mut(name).expect(name).scope = Scope::PerItem;
            assert_eq!(settle(&mut policies), Err(NotAllowed::Scope(name.into())));
        }
    }

    #[test]
    fn the_sale_per_item_cannot_be_shaped() {
        assert_eq!(
            check_scope(SECKILL_POLICY, Scope::PerItem, Algorithm::LeakyBucket),
            Err(NotAllowed::Shaper(SECKILL_POLICY.into()))
        );
        assert_eq!(
            check_scope(SECKILL_POLICY, Scope::Global, Algorithm::LeakyBucket),
            Ok(())
        );
        assert_eq!(check_key(LIMITED_POLICY, &KeySource::Ip), Ok(()));
        assert!(check_key(LIMITED_POLICY, &KeySource::User).is_err());
        assert_eq!(check_key(SECKILL_POLICY, &KeySource::User), Ok(()));
    }

    #[test]
    fn a_rule_on_a_source_its_routes_do_not_supply_is_refused_by_name() {
        assert_eq!(
            check_key(SECKILL_POLICY, &KeySource::ClientId),
            Err(NotAllowed::Key {
                policy: SECKILL_POLICY.into(),
                key: "client_id",
                supplied: "literal, user, ip, network, route".into(),
            })
        );
        assert_eq!(check_key(LIMITED_POLICY, &KeySource::ClientId), Ok(()));
        assert!(check_key(ADMIN_AUTH_POLICY, &KeySource::Network).is_err());
        assert_eq!(
            check_key(ORDERS_READ_POLICY, &KeySource::Literal("x".into())),
            Ok(())
        );
        // A policy no route checks (the engine's own tests) takes any source.
        assert_eq!(check_key("p", &KeySource::ClientId), Ok(()));
    }

    #[test]
    fn a_settings_files_rule_on_an_unsupplied_source_counts_by_ip_as_it_did_and_user_is_still_refused(
    ) {
        let mut policies = defaults();
        let rule = |key| RuleConfig::new("device", key, 60_000, 2, "one device, two tries");
        let seckill = policies.get_mut(SECKILL_POLICY).expect("seckill");
        seckill.rules.push(rule(KeySource::ClientId));
        let admin_auth = policies.get_mut(ADMIN_AUTH_POLICY).expect("admin_auth");
        admin_auth.rules[0].key = KeySource::Network;
        assert_eq!(settle(&mut policies), Ok(()));
        assert_eq!(policies[SECKILL_POLICY].rules[3], rule(KeySource::Ip));
        assert_eq!(policies[ADMIN_AUTH_POLICY], defaults()[ADMIN_AUTH_POLICY]);

        let mut policies = defaults();
        let limited = policies.get_mut(LIMITED_POLICY).expect("limited");
        limited.rules.push(rule(KeySource::User));
        assert!(matches!(
            settle(&mut policies),
            Err(NotAllowed::Key { key: "user", .. })
        ));
    }

    #[test]
    fn every_policy_the_app_seeds_has_a_row_of_key_sources() {
        for name in defaults().keys() {
            assert!(key_sources(name).is_some(), "{name}");
        }
        assert_eq!(KEY_SOURCES.len(), defaults().len());
    }
}
