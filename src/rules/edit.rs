//! A policy edit as an operator makes it: what may change (the algorithm, the switch,
//! the fail mode, the scope where the policy's callers allow it, each named rule's window, threshold
//! and message; never a key source), how it merges
//! onto the stored policy, and what a refused edit tells its author, down to the field
//! (in the dashboard's spelling) it points at.

use serde::Deserialize;
use validator::Validate;

use crate::configuration::policies::{check_scope, ScopeNotAllowed};
use crate::limiter::policy::{Algorithm, FailMode, PolicyConfig, PolicyError, RuleConfig, Scope};

/// An edit of one policy. `version`, when given, is the version it was made from: the
/// edit is refused unless the policy is still at it.
#[derive(Debug, Deserialize, Validate, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyEdit {
    pub version: Option<i64>,
    pub algorithm: Option<Algorithm>,
    pub enabled: Option<bool>,
    pub scope: Option<Scope>,
    /// What the limiter does when it cannot ask Redis: `open` or `closed`.
    pub fail_mode: Option<FailMode>,
    pub rules: Vec<RuleEdit>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleEdit {
    /// One of the policy's rules.
    #[schema(pattern = "^[a-z0-9_-]{1,32}$")]
    pub name: String,
    #[schema(minimum = 1, maximum = 1_125_899_906_842_624_u64)]
    pub window_ms: Option<u64>,
    #[schema(minimum = 1, maximum = 1_125_899_906_842_624_u64)]
    pub threshold: Option<u64>,
    /// The refusal's message, 1 to 200 characters.
    #[schema(min_length = 1, max_length = 200)]
    pub message: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RuleChangeError {
    #[error("no policy named {0:?}")]
    UnknownPolicy(String),
    /// The change was made from another version than the stored one: someone else
    /// changed the policy since its author loaded it.
    #[error("policy {policy:?} is at version {current}, not the one this change was made from")]
    VersionConflict { policy: String, current: i64 },
    /// The change names a rule the policy does not have (`index` into the change's rules).
    #[error("policy {policy:?} has no rule {rule:?}")]
    UnknownRule {
        policy: String,
        rule: String,
        index: usize,
    },
    #[error(transparent)]
    Invalid(#[from] PolicyError),
    /// `per_item` on a policy whose callers name no item: every check would fail.
    #[error(transparent)]
    Scope(#[from] ScopeNotAllowed),
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

impl RuleChangeError {
    /// The field of the edit a refusal points at, in the edit's own spelling; `None`
    /// when the edit itself is not at fault.
    pub fn field(&self) -> Option<String> {
        match self {
            Self::UnknownRule { index, .. } => Some(format!("rules[{index}].name")),
            Self::Invalid(invalid) => Some(invalid_field(invalid).into()),
            Self::Scope(_) => Some("scope".into()),
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
        check_scope(policy, config.scope)?;
        for (index, edit) in self.rules.iter().enumerate() {
            let rule: &mut RuleConfig = config
                .rules
                .iter_mut()
                .find(|r| r.name == edit.name)
                .ok_or_else(|| RuleChangeError::UnknownRule {
                    policy: policy.to_string(),
                    rule: edit.name.clone(),
                    index,
                })?;
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
        }
        Ok(config)
    }
}
