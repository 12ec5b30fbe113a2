//! Redis keys of the limiter, by the policy's [`Scope`].
//!
//! - `global`: `<prefix>:{<policy>}:<algorithm>:<rule>:<value>`, for example
//!   `seckill:{seckill}:sliding_window:user:42`. The `{<policy>}` hash tag puts every key
//!   of the policy in one Redis Cluster slot: a literal rule (`api`) is one total across
//!   everything the policy guards, and the shard holding that slot sees every decision
//!   of the policy that the denial cache does not answer.
//! - `per_item`: `<prefix>:{<partition>}:limit:<policy>:<algorithm>:<rule>:<value>`, for
//!   example `seckill:{item:7}:limit:seckill:sliding_window:user:42`. The engine knows
//!   no item: the caller supplies a [`Partition`] (the sale hands over its item's own
//!   hash tag, `item:<id>`, see `sale::stock::item_keys`), so a policy's keys for one
//!   partition share one slot with whatever else the application keeps under that tag,
//!   and different partitions spread over the shards. Every rule is then counted per
//!   partition, a literal one included. A per-partition policy checked without a
//!   partition is [`Rejection::Misconfigured`]: refusing is safer than guessing one.
//!   `limit:` keeps these keys apart from the application's own under the same tag.
//!
//! Either way one policy decision touches one slot, so one script decides it.
//!
//! - The algorithm is part of the key, so switching a policy's algorithm never meets a
//!   key of the other type (a sorted set where a hash is expected), and each algorithm
//!   keeps its own quota.
//! - A rule's limits are not part of the key: an edit keeps every caller's state (the
//!   scripts convert it) instead of handing everyone a fresh quota.
//! - Its key source is, in effect: the values of different sources never look alike
//!   (a user id is digits, an IP has dots or colons, a network `net:`, a client id is
//!   `id:`/`ip:`, a route starts with `/`, a literal with `lit:`), so a rule removed and added back under the
//!   same name with another source starts fresh instead of reading the old counts.
//! - Every part is bounded and from a known alphabet: names are checked when policies
//!   load, partitions and client ids when made, IPs and user ids are printed by us.

use std::borrow::Cow;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::policy::{Algorithm, Policy, Rule};
use super::Rejection;
use crate::domain::{ClientId, ClientIp, UserId};

/// Where a policy's keys live (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One hash tag per policy: every decision on one shard, literal rules are totals.
    #[default]
    Global,
    /// One hash tag per partition the caller names (the sale: its item).
    PerItem,
}

/// A hash tag a caller puts its per-partition keys under: 1-64 characters of
/// `A-Z a-z 0-9 . _ : -`, so it can never close the tag (`}`) or break a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition(String, Option<i64>);

impl Partition {
    /// `tag` as a partition, if it is key-safe (1-64 characters of `A-Z a-z 0-9 . _ : -`).
    pub fn new(tag: String) -> Option<Self> {
        let safe = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-');
        ((1..=64).contains(&tag.len()) && tag.bytes().all(safe)).then_some(Self(tag, None))
    }

    /// The same partition, naming the item it stands for: the history tags a refusal
    /// with it (`tally::refusals`); keys never read it.
    pub fn for_item(self, item: i64) -> Self {
        Self(self.0, Some(item))
    }

    /// The tag, as written into keys.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The item it stands for, if the caller named one.
    pub fn item(&self) -> Option<i64> {
        self.1
    }
}

/// Where a rule's key value comes from. Which sources a policy's rules may use is the
/// application's to say (what its routes supply: `configuration::policies::KEY_SOURCES`);
/// a [`Caller`] without the value a rule needs is refused, never keyed on something
/// else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// One shared key: the whole endpoint, across all instances.
    Literal(String),
    /// The authenticated user id.
    User,
    /// The client IP (see `http::forwarded` for whom we believe).
    Ip,
    /// The client IP's network: its /24, or an IPv6 client's /48 (`ClientIp::network`),
    /// for a limit on everyone in it.
    Network,
    /// `X-Client-Id` ([`ClientKey`]: on `/api/limited`, its address when there is none).
    ClientId,
    /// The matched route pattern.
    Route,
}

impl KeySource {
    /// The source's word, as settings and the admin API spell it (a literal: `literal`),
    /// for messages that name it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Literal(_) => "literal",
            Self::User => "user",
            Self::Ip => "ip",
            Self::Network => "network",
            Self::ClientId => "client_id",
            Self::Route => "route",
        }
    }

    /// Whether `self` and `other` are the same source (a literal's value aside).
    pub fn same_source(&self, other: &KeySource) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// What a `client_id` rule counts a caller by.
#[derive(Debug, Clone, Copy)]
pub enum ClientKey<'a> {
    /// The caller's own `X-Client-Id`.
    Id(&'a ClientId),
    /// Its address, standing in for a missing (or unbelieved) `X-Client-Id`:
    /// `/api/limited`'s documented fallback, which its guard chooses; no other route
    /// supplies a client.
    Address,
}

/// Who is asking, as far as the limiter cares. A route builds it in one place,
/// `http::rate_limit::caller`.
#[derive(Debug, Clone)]
pub struct Caller<'a> {
    /// The signed-in user, where the route has one.
    pub user: Option<UserId>,
    /// The client's address, as `http::forwarded` believes it.
    pub ip: ClientIp,
    /// What a `client_id` rule counts by; `None` where the route supplies no client.
    pub client_id: Option<ClientKey<'a>>,
    /// The matched route's pattern, from the router (ours, never the raw path).
    pub route: Cow<'a, str>,
    /// What a `per_item` policy counts under (the sale: its item); `None` where the
    /// caller has no such thing, and then only `global` policies may be checked.
    pub partition: Option<Partition>,
}

impl Caller<'_> {
    /// The same caller counted under `partition`: the sale names its item itself, so its
    /// limiter keys share the slot of the item's own (see the module docs).
    /// Borrows the route, so the sale's every purchase copies no string.
    pub fn in_partition(&self, partition: Option<Partition>) -> Caller<'_> {
        Caller {
            user: self.user,
            ip: self.ip,
            client_id: self.client_id,
            route: Cow::Borrowed(&self.route),
            partition,
        }
    }
}

/// The Redis key of `rule` of `policy` for `caller` (see the module docs).
pub fn redis_key(
    prefix: &str,
    policy: &Policy,
    algorithm: Algorithm,
    rule: &Rule,
    caller: &Caller<'_>,
) -> Result<String, Rejection> {
    let name = &policy.name;
    let mut key = String::with_capacity(prefix.len() + 2 * name.len() + rule.name.len() + 64);
    // Writing to a String cannot fail.
    let _ = match policy.scope {
        Scope::Global => write!(key, "{prefix}:{{{name}}}:{algorithm}:{}:", rule.name),
        Scope::PerItem => {
            let partition = caller.partition.as_ref().ok_or_else(|| {
                Rejection::Misconfigured(format!(
                    "policy {name:?} is per_item, but its caller names no partition"
                ))
            })?;
            write!(
                key,
                "{prefix}:{{{}}}:limit:{name}:{algorithm}:{}:",
                partition.as_str(),
                rule.name
            )
        }
    };
    let _ = match &rule.key {
        KeySource::Literal(value) => write!(key, "lit:{value}"),
        KeySource::User => write!(key, "{}", caller.user.ok_or(Rejection::NeedsUser)?),
        KeySource::Ip => write!(key, "{}", caller.ip),
        // `net:` and the prefix length: never an address's own key.
        KeySource::Network => write!(key, "net:{}", caller.ip.network()),
        KeySource::ClientId => match caller.client_id {
            Some(ClientKey::Id(id)) => write!(key, "id:{id}"),
            // Prefixed so a client id can never pose as someone's IP.
            Some(ClientKey::Address) => write!(key, "ip:{}", caller.ip),
            None => return Err(unsupplied(policy, rule)),
        },
        KeySource::Route => write!(key, "{}", caller.route),
    };
    Ok(key)
}

/// A rule keyed on a source its caller does not supply: the policy's key-source table
/// let through what its route does not build (see [`KeySource`]); refused, never keyed
/// on something else.
fn unsupplied(policy: &Policy, rule: &Rule) -> Rejection {
    Rejection::Misconfigured(format!(
        "policy {:?} keys rule {:?} on {}, which its caller does not supply",
        policy.name,
        rule.name,
        rule.key.as_str()
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::limiter::policy::{PolicyConfig, RuleConfig};

    fn policy(scope: Scope) -> Policy {
        let rules = vec![
            RuleConfig::new("api", KeySource::Literal("all".into()), 1_000, 9, "busy"),
            RuleConfig::new("user", KeySource::User, 60_000, 3, "slow down"),
        ];
        // Stored rows from before scopes have no `scope`: they stay `global`.
        let mut config: PolicyConfig = serde_json::from_value(serde_json::json!({
            "algorithm": "sliding_window",
            "rules": rules,
        }))
        .expect("a policy without a scope");
        assert_eq!(config.scope, Scope::Global);
        config.scope = scope;
        Policy::parse("p", &config).expect("a valid policy")
    }

    /// A signed-in caller from one address, for the limiter's unit tests.
    pub(crate) fn caller(partition: Option<&str>) -> Caller<'static> {
        Caller {
            user: UserId::try_from(42).ok(),
            ip: ClientIp::new([10, 0, 0, 7].into()),
            client_id: None,
            route: "/r".into(),
            partition: partition.and_then(|tag| Partition::new(tag.into())),
        }
    }

    fn keys(policy: &Policy, caller: &Caller<'_>) -> Result<Vec<String>, Rejection> {
        let key = |rule| redis_key("x", policy, Algorithm::SlidingWindow, rule, caller);
        policy.rules.iter().map(key).collect()
    }

    #[test]
    fn global_keys_ignore_any_partition_and_per_item_keys_carry_it() {
        let global = policy(Scope::Global);
        let expected = [
            "x:{p}:sliding_window:api:lit:all",
            "x:{p}:sliding_window:user:42",
        ];
        assert_eq!(keys(&global, &caller(None)).unwrap(), expected);
        assert_eq!(keys(&global, &caller(Some("item:7"))).unwrap(), expected);
        assert_eq!(
            keys(&policy(Scope::PerItem), &caller(Some("item:7"))).unwrap(),
            [
                "x:{item:7}:limit:p:sliding_window:api:lit:all",
                "x:{item:7}:limit:p:sliding_window:user:42",
            ]
        );
    }

    #[test]
    fn a_per_item_policy_without_a_partition_is_misconfigured() {
        assert!(matches!(
            keys(&policy(Scope::PerItem), &caller(None)),
            Err(Rejection::Misconfigured(_))
        ));
    }

    #[test]
    fn a_partition_cannot_break_its_hash_tag() {
        for bad in ["", "item}:7", "{item:7", "item 7", &"x".repeat(65)] {
            assert_eq!(Partition::new(bad.into()), None, "{bad:?}");
        }
        assert!(Partition::new("item:7".into()).is_some());
    }
}
