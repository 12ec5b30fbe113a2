//! A policy edit as an operator makes it: what may change (the algorithm, the switch,
//! the fail mode, the scope where the policy's callers allow it; each named rule's
//! window, threshold, message, shadow flag and maximum delay, never its key source; and
//! which rules there are: a rule the policy lacks is added, one marked `remove` is
//! removed), how it merges onto the stored policy, and what a refused edit tells its
//! author, down to the field (in the dashboard's spelling) it points at.

use serde::Deserialize;
use validator::Validate;

use crate::configuration::policies::{check_key, check_rule_set_change, check_scope, NotAllowed};
use crate::limiter::policy::{
    Algorithm, FailMode, KeySource, PolicyConfig, PolicyError, RuleConfig, Scope,
};

/// An edit of one policy. `version`, when given, is the version it was made from: the
/// edit is refused unless the policy is still at it.
#[derive(Debug, Deserialize, Validate, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyEdit {
    /// The policy's version this edit was made from; absent skips the check.
    pub version: Option<i64>,
    /// The new algorithm; its rules start from fresh counts (the algorithm is part of
    /// their keys).
    pub algorithm: Option<Algorithm>,
    /// The operator's switch: `false` admits everything without asking Redis.
    pub enabled: Option<bool>,
    /// `global` or `per_item`, where the policy's callers name an item.
    pub scope: Option<Scope>,
    /// What the limiter does when it cannot ask Redis: `open` or `closed`.
    pub fail_mode: Option<FailMode>,
    /// The rules to edit, add or remove (by name); the others stay.
    pub rules: Vec<RuleEdit>,
}

/// One entry of an edit's `rules`: an edit of the named rule, a new rule (the name is
/// not the policy's yet: `key`, `windowMs`, `threshold` and `message` are then
/// required), or a removal (`"remove": true`, nothing else). Rules the edit leaves out
/// stay as they are.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleEdit {
    /// The rule: one of the policy's, or a new one.
    #[schema(pattern = "^[a-z0-9_-]{1,32}$")]
    pub name: String,
    /// Where a new rule's key comes from: `user`, `ip`, `client_id`, `route` or
    /// `{"literal": "…"}`. An existing rule's source never changes (a removal and an
    /// addition do that, and the new rule starts with fresh counts).
    pub key: Option<KeySource>,
    /// A new window, in milliseconds.
    #[schema(minimum = 1, maximum = 1_125_899_906_842_624_u64)]
    pub window_ms: Option<u64>,
    /// A new threshold: requests admitted per window and key.
    #[schema(minimum = 1, maximum = 1_125_899_906_842_624_u64)]
    pub threshold: Option<u64>,
    /// The refusal's message, 1 to 200 characters.
    #[schema(min_length = 1, max_length = 200)]
    pub message: Option<String>,
    /// A shadow rule counts what it would refuse and never refuses.
    pub shadow: Option<bool>,
    /// The leaky bucket's longest wait for a departure slot, 0 to 60 000 ms.
    #[schema(minimum = 0, maximum = 60_000)]
    pub max_delay_ms: Option<u64>,
    /// Removes the rule.
    pub remove: Option<bool>,
}

/// Why a policy change was refused or failed; each maps to one API error
/// (`http::routes::admin::rules`).
#[derive(Debug, thiserror::Error)]
pub enum RuleChangeError {
    /// No policy by that name.
    #[error("no policy named {0:?}")]
    UnknownPolicy(String),
    /// The change was made from another version than the stored one: someone else
    /// changed the policy since its author loaded it.
    #[error("policy {policy:?} is at version {current}, not the one this change was made from")]
    VersionConflict {
        /// The policy edited.
        policy: String,
        /// The version it is at now.
        current: i64,
    },
    /// The change removes a rule the policy does not have (`index` into the change's
    /// rules).
    #[error("policy {policy:?} has no rule {rule:?}")]
    UnknownRule {
        /// The policy edited.
        policy: String,
        /// The rule named for removal.
        rule: String,
        /// Its index in the change's rules, for the field the error points at.
        index: usize,
    },
    /// An entry of the change's rules that cannot be: a new rule without a field it
    /// needs, a removal with more than the name, a key source changed in place.
    /// `field` is the entry's field at fault (`rules[2].key`).
    #[error("{why}")]
    BadRuleEdit {
        /// The field at fault, in the dashboard's spelling (`rules[2].key`).
        field: String,
        /// What is wrong with it, for the operator.
        why: String,
    },
    /// The merged policy fails the limiter's own checks.
    #[error(transparent)]
    Invalid(#[from] PolicyError),
    /// What the policy's callers cannot support (a `per_item` scope where they name no
    /// item, a shaper composed with a reservation, a key they do not carry, rules added
    /// to the admin sign-in's); `index` is the change's rule it is about, if one.
    #[error("{error}")]
    NotAllowed {
        /// What is refused.
        error: NotAllowed,
        /// The change's rule it is about, if one.
        index: Option<usize>,
    },
    /// Postgres failed; the change was not made.
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

impl RuleChangeError {
    /// The field of the edit a refusal points at, in the edit's own spelling; `None`
    /// when the edit itself is not at fault.
    pub fn field(&self) -> Option<String> {
        match self {
            Self::UnknownRule { index, .. } => Some(format!("rules[{index}].name")),
            Self::BadRuleEdit { field, .. } => Some(field.clone()),
            Self::Invalid(invalid) => Some(invalid_field(invalid).into()),
            Self::NotAllowed { error, index } => Some(match (error, index) {
                (NotAllowed::Scope(_), _) => "scope".into(),
                (NotAllowed::Shaper(_), _) => "algorithm".into(),
                (NotAllowed::Key { .. }, Some(i)) => format!("rules[{i}].key"),
                (NotAllowed::FixedRules(_), Some(i)) => format!("rules[{i}].name"),
                (NotAllowed::Key { .. } | NotAllowed::FixedRules(_), None) => "rules".into(),
            }),
            Self::UnknownPolicy(_) | Self::VersionConflict { .. } | Self::Store(_) => None,
        }
    }
}

/// The field of an edit a policy error points at: an edit sets windows, thresholds and
/// messages, and the token-bucket parameters follow from the first two.
fn invalid_field(error: &PolicyError) -> &'static str {
    match error {
        PolicyError::NotPositive { field, .. } | PolicyError::TooLarge { field, .. } => {
            match *field {
                "windowMs" | "refillMs" => "windowMs",
                _ => "threshold",
            }
        }
        PolicyError::BadMessage(_) => "message",
        PolicyError::BadMaxDelay(_) => "maxDelayMs",
        PolicyError::BadLiteral(_) => "key",
        PolicyError::BadRuleName(_) => "name",
        _ => "rules",
    }
}

impl PolicyEdit {
    /// The stored policy with this edit merged in (named rules only).
    pub fn apply(
        &self,
        policy: &str,
        mut config: PolicyConfig,
    ) -> Result<PolicyConfig, RuleChangeError> {
        if let Some(algorithm) = self.algorithm {
            config.algorithm = algorithm;
        }
        if let Some(enabled) = self.enabled {
            config.enabled = enabled;
        }
        if let Some(scope) = self.scope {
            config.scope = scope;
        }
        if let Some(fail_mode) = self.fail_mode {
            config.fail_mode = fail_mode;
        }
        // The merged scope, not only an edited one: a policy stored as `per_item` by
        // hand is refused here too, before an edit of its rules could bless it.
        check_scope(policy, config.scope, config.algorithm)
            .map_err(|error| RuleChangeError::NotAllowed { error, index: None })?;
        for (index, edit) in self.rules.iter().enumerate() {
            let bad = |field: &str, why: &str| RuleChangeError::BadRuleEdit {
                field: format!("rules[{index}].{field}"),
                why: why.to_string(),
            };
            let not_allowed = |error| RuleChangeError::NotAllowed {
                error,
                index: Some(index),
            };
            let found = config.rules.iter().position(|r| r.name == edit.name);
            if edit.remove == Some(true) {
                if edit.key.is_some()
                    || edit.window_ms.is_some()
                    || edit.threshold.is_some()
                    || edit.message.is_some()
                    || edit.shadow.is_some()
                    || edit.max_delay_ms.is_some()
                {
                    return Err(bad("remove", "a removal names the rule and nothing else"));
                }
                check_rule_set_change(policy).map_err(not_allowed)?;
                let found = found.ok_or_else(|| RuleChangeError::UnknownRule {
                    policy: policy.to_string(),
                    rule: edit.name.clone(),
                    index,
                })?;
                config.rules.remove(found);
                continue;
            }
            let Some(found) = found else {
                config.rules.push(edit.new_rule(policy, index)?);
                continue;
            };
            let rule: &mut RuleConfig = &mut config.rules[found];
            if edit.key.as_ref().is_some_and(|key| *key != rule.key) {
                return Err(bad(
                    "key",
                    "a rule's key source cannot change: remove the rule and add it back",
                ));
            }
            if let Some(window_ms) = edit.window_ms {
                rule.window_ms = window_ms;
                rule.refill_ms = None; // the token bucket follows the window
            }
            if let Some(threshold) = edit.threshold {
                rule.threshold = threshold;
                rule.capacity = None;
                rule.refill_tokens = None;
            }
            if let Some(message) = &edit.message {
                rule.message = message.clone();
            }
            if let Some(shadow) = edit.shadow {
                rule.shadow = shadow;
            }
            if let Some(max_delay_ms) = edit.max_delay_ms {
                rule.max_delay_ms = Some(max_delay_ms);
            }
        }
        Ok(config)
    }
}

impl RuleEdit {
    /// The rule this entry adds to `policy` (entry `index` of the edit): every field a
    /// rule needs, and a key source the policy's callers carry.
    fn new_rule(&self, policy: &str, index: usize) -> Result<RuleConfig, RuleChangeError> {
        let missing = |field: &str| {
            RuleChangeError::BadRuleEdit {
            field: format!("rules[{index}].{field}"),
            why: format!(
                "policy {policy:?} has no rule {:?}; a new rule needs key, windowMs, threshold and message",
                self.name
            ),
        }
        };
        let not_allowed = |error| RuleChangeError::NotAllowed {
            error,
            index: Some(index),
        };
        check_rule_set_change(policy).map_err(not_allowed)?;
        // Without a key source the entry was not meant as a new rule: most likely a
        // name mistyped, so the name is the field at fault.
        let key = self.key.clone().ok_or_else(|| missing("name"))?;
        check_key(policy, &key).map_err(not_allowed)?;
        let mut rule = RuleConfig::new(
            &self.name,
            key,
            self.window_ms.ok_or_else(|| missing("windowMs"))?,
            self.threshold.ok_or_else(|| missing("threshold"))?,
            self.message.as_deref().ok_or_else(|| missing("message"))?,
        );
        rule.shadow = self.shadow.unwrap_or(false);
        rule.max_delay_ms = self.max_delay_ms;
        Ok(rule)
    }
}
