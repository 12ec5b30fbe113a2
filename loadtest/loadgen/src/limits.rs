//! The limits the purchases' checks hold the service to: each part the caller gave, the
//! rest read from the `seckill` policy the service runs (`GET
//! /admin/api/policies/seckill`), so a deployment is held to its own limits and no
//! figure of the defaults is copied here. A dimension whose limit cannot be read (the
//! policy has no rule keyed on it, or does not enforce it the way the checks bound) is
//! not judged, and its check says why.

use std::time::Duration;

use crate::config::{Limit, LimitParts, Limits};
use crate::policies::{Policy, Rule};

/// The policy guarding `POST /seckill`.
pub(crate) const PURCHASE_POLICY: &str = "seckill";

/// The algorithm whose bound the checks use: `limit + 1` admissions of a key less than a
/// window apart are a certain breach of the sliding log, not of a bucket (a full bucket
/// and its refill) nor of a fixed window (two windows' worth across an edge).
const CHECKED_ALGORITHM: &str = "sliding_window";

/// One dimension's limit to hold the purchases to, or why there is none.
#[derive(Debug, Clone)]
pub(crate) enum Expected {
    Limit(Limit),
    Unjudged(String),
}

/// The three dimensions' limits of a run.
#[derive(Debug, Clone)]
pub(crate) struct Expectations {
    pub(crate) user: Expected,
    pub(crate) ip: Expected,
    pub(crate) api: Expected,
}

/// The dimensions of the purchase, each by the key its rule is keyed on.
#[derive(Debug, Clone, Copy)]
enum Dimension {
    User,
    Ip,
    /// One count for every purchase: a rule keyed on a literal.
    Api,
}

impl Dimension {
    fn keys(self, rule: &Rule) -> bool {
        match self {
            Self::User => rule.key == "user",
            Self::Ip => rule.key == "ip",
            Self::Api => rule.key.get("literal").is_some(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Ip => "ip",
            Self::Api => "literal",
        }
    }
}

/// Whether any part of `limits` is left to read from the policy.
pub(crate) fn to_read(limits: &Limits) -> bool {
    [limits.user, limits.ip, limits.api]
        .iter()
        .any(|parts| parts.count.is_none() || parts.window.is_none())
}

/// `limits` completed from `policy` (`None`: every part was given).
pub(crate) fn expectations(limits: &Limits, policy: Option<&Policy>) -> Expectations {
    Expectations {
        user: expected(limits.user, Dimension::User, policy),
        ip: expected(limits.ip, Dimension::Ip, policy),
        api: expected(limits.api, Dimension::Api, policy),
    }
}

fn expected(given: LimitParts, dimension: Dimension, policy: Option<&Policy>) -> Expected {
    if let (Some(count), Some(window)) = (given.count, given.window) {
        return Expected::Limit(Limit { count, window });
    }
    let Some(policy) = policy else {
        return Expected::Unjudged(format!("not judged: no {PURCHASE_POLICY} policy read"));
    };
    let Some(rule) = policy.rules.iter().find(|r| dimension.keys(r)) else {
        return Expected::Unjudged(format!(
            "not judged: policy {} has no rule keyed on {}",
            policy.name,
            dimension.name()
        ));
    };
    // A count given holds whatever the policy does with it; a count read is the
    // service's only if it enforces it with the algorithm whose bound the checks use.
    if given.count.is_none() {
        let unenforced = if !policy.enabled {
            Some(format!("policy {} is disabled", policy.name))
        } else if rule.shadow {
            Some(format!("rule {} is in shadow mode", rule.name))
        } else if policy.algorithm != CHECKED_ALGORITHM {
            Some(format!(
                "policy {} uses {}, and the checks bound {CHECKED_ALGORITHM} only",
                policy.name, policy.algorithm
            ))
        } else {
            None
        };
        if let Some(why) = unenforced {
            return Expected::Unjudged(format!("not judged: {why}"));
        }
    }
    Expected::Limit(Limit {
        count: given.count.unwrap_or(rule.threshold),
        window: given
            .window
            .unwrap_or(Duration::from_millis(rule.window_ms)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, key: serde_json::Value, window_ms: u64, threshold: u64) -> Rule {
        Rule {
            name: name.into(),
            key,
            window_ms,
            threshold,
            shadow: false,
        }
    }

    /// A policy as a deployment might run it: none of its figures are the defaults.
    fn policy() -> Policy {
        Policy {
            name: PURCHASE_POLICY.into(),
            algorithm: CHECKED_ALGORITHM.into(),
            fail_mode: "closed".into(),
            enabled: true,
            rules: vec![
                rule("all", serde_json::json!({ "literal": "buy" }), 2_000, 700),
                rule("per-user", serde_json::json!("user"), 30_000, 2),
                rule("per-address", serde_json::json!("ip"), 90_000, 9),
            ],
        }
    }

    fn limit(expected: &Expected) -> (u64, Duration) {
        match expected {
            Expected::Limit(l) => (l.count, l.window),
            Expected::Unjudged(why) => panic!("unjudged: {why}"),
        }
    }

    fn unjudged(expected: &Expected) -> &str {
        match expected {
            Expected::Limit(l) => panic!("judged: {l:?}"),
            Expected::Unjudged(why) => why,
        }
    }

    #[test]
    fn the_limits_not_given_are_the_running_policys_rules_by_their_key() {
        let e = expectations(&Limits::default(), Some(&policy()));
        assert_eq!(limit(&e.user), (2, Duration::from_secs(30)));
        assert_eq!(limit(&e.ip), (9, Duration::from_secs(90)));
        assert_eq!(limit(&e.api), (700, Duration::from_secs(2)));
    }

    #[test]
    fn a_part_given_overrides_the_rules_and_the_rest_is_read() {
        let limits = Limits {
            user: LimitParts {
                count: Some(1_000_000_000),
                window: None,
            },
            ..Limits::default()
        };
        assert!(to_read(&limits));
        let e = expectations(&limits, Some(&policy()));
        assert_eq!(limit(&e.user), (1_000_000_000, Duration::from_secs(30)));
        assert_eq!(limit(&e.ip), (9, Duration::from_secs(90)));
    }

    #[test]
    fn limits_given_whole_need_no_policy() {
        let given = Limit {
            count: 3,
            window: Duration::from_secs(60),
        };
        let limits = Limits {
            user: given.into(),
            ip: given.into(),
            api: given.into(),
        };
        assert!(!to_read(&limits));
        assert_eq!(
            limit(&expectations(&limits, None).api),
            (3, Duration::from_secs(60))
        );
    }

    #[test]
    fn a_dimension_the_policy_does_not_enforce_as_checked_is_not_judged() {
        let mut p = policy();
        p.rules.retain(|r| r.name != "per-address");
        p.rules[1].shadow = true;
        let e = expectations(&Limits::default(), Some(&p));
        assert_eq!(
            unjudged(&e.ip),
            "not judged: policy seckill has no rule keyed on ip"
        );
        assert_eq!(
            unjudged(&e.user),
            "not judged: rule per-user is in shadow mode"
        );
        p.algorithm = "token_bucket".into();
        assert_eq!(
            unjudged(&expectations(&Limits::default(), Some(&p)).api),
            "not judged: policy seckill uses token_bucket, and the checks bound sliding_window only"
        );
        p.enabled = false;
        assert_eq!(
            unjudged(&expectations(&Limits::default(), Some(&p)).api),
            "not judged: policy seckill is disabled"
        );
    }
}
