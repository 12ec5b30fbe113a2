//! What a check answers: an [`Admission`], or a [`Rejection`] (a [`Refusal`] by a rule,
//! or the limiter unable to decide).

use std::sync::Arc;

use super::backend::Decision;
use super::installed::Enforced;
use super::{Algorithm, Policy};

/// The request may proceed.
#[derive(Debug, Clone)]
pub struct Admission {
    /// The policy it was decided under (the snapshot in force when it started).
    pub policy: Arc<Policy>,
    /// The algorithm it counted with: the policy's, unless the caller forced one (the
    /// benchmark).
    pub algorithm: Algorithm,
    /// The tightest rule and what it has left; `None` when admitted without asking
    /// Redis (fail-open, or the policy is disabled).
    pub quota_left: Option<QuotaLeft>,
    /// How long the answer was held for its departure slot (the leaky bucket's
    /// shaping; 0 for every other algorithm).
    pub delayed_ms: u64,
}

/// How much the tightest rule has left after an admission: the `RateLimit` header's
/// figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaLeft {
    /// Index into the policy's rules.
    pub rule: usize,
    /// Requests the rule admits before refusing, counting this one as spent.
    pub remaining: i64,
    /// When `remaining` is 0: ms until `rule` admits again, else 0.
    pub next_slot_ms: i64,
}

/// The limiter refused: which rule, its message, how long to wait.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The policy that refused (the snapshot in force when it started).
    pub policy: Arc<Policy>,
    /// The algorithm it counted with.
    pub algorithm: Algorithm,
    /// Index into the policy's rules of the rule that answers for the refusal: the first
    /// refusing one.
    pub rule: usize,
    /// How long until that rule would admit (≥ 1).
    pub own_wait_ms: u64,
    /// The longest wait among the refusing rules (≥ 1): only then would all of them
    /// admit.
    pub longest_wait_ms: u64,
    /// Answered from the denial cache, without asking Redis.
    pub local: bool,
}

/// Why the limiter did not admit a request; each becomes one API error.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    /// A rule refused: which, its message and its waits.
    #[error("rate limited")]
    Refused(Box<Refusal>),
    /// Redis could not be asked and the policy fails closed.
    #[error("the rate limiter is unavailable")]
    Unavailable,
    /// A rule keyed by user on a request without one.
    #[error("this limit needs an authenticated user")]
    NeedsUser,
    /// A caller the limiter cannot key (a per-item policy without a partition): a bug of
    /// ours, answered 500.
    #[error("limiter misconfigured: {0}")]
    Misconfigured(String),
}

impl Refusal {
    /// The refusing rule's name: the `dimension` the client and the metrics see.
    pub fn dimension(&self) -> &str {
        &self.policy.rules[self.rule].name
    }

    /// What the refused client reads (the rule's message).
    pub fn message(&self) -> &str {
        &self.policy.rules[self.rule].message
    }

    /// The longest wait among the refusing rules: only then would all of them admit.
    pub fn retry_after_ms(&self) -> u64 {
        self.longest_wait_ms
    }
}

/// A refusal the denial cache answered, counted as the rule's rejection and as local.
pub(super) fn refuse_locally(refusal: Refusal, enforced: &Enforced) -> Rejection {
    enforced.rejects[refusal.rule].inc();
    enforced.local_refusals[refusal.rule].inc();
    Rejection::Refused(Box::new(refusal))
}

pub(super) fn record(
    enforced: &Enforced,
    algorithm: Algorithm,
    decision: Decision,
) -> Result<Admission, Rejection> {
    match decision {
        Decision::Admitted {
            tightest,
            remaining,
            next_slot_ms,
            delay_ms,
            near_limit,
            shadow_refused,
        } => {
            for passes in &enforced.passes[..enforced.policy.enforced] {
                passes.inc();
            }
            if near_limit != 0 {
                for (rule, near) in enforced.near_limit.iter().enumerate() {
                    if near_limit & (1 << rule) != 0 {
                        near.inc();
                    }
                }
            }
            if shadow_refused != 0 {
                for (rule, refusals) in enforced.shadow_refusals.iter().enumerate() {
                    if shadow_refused & (1 << rule) != 0 {
                        refusals.inc();
                    }
                }
            }
            Ok(Admission {
                policy: Arc::clone(&enforced.policy),
                algorithm,
                quota_left: Some(QuotaLeft {
                    rule: tightest,
                    remaining,
                    next_slot_ms,
                }),
                delayed_ms: delay_ms as u64,
            })
        }
        Decision::Refused {
            rule,
            retry_after_ms,
            longest_retry_after_ms,
        } => {
            enforced.rejects[rule].inc();
            let own_wait_ms = retry_after_ms.max(1);
            Err(Rejection::Refused(Box::new(Refusal {
                policy: Arc::clone(&enforced.policy),
                algorithm,
                rule,
                own_wait_ms: own_wait_ms as u64,
                longest_wait_ms: longest_retry_after_ms.max(own_wait_ms) as u64,
                local: false,
            })))
        }
    }
}
