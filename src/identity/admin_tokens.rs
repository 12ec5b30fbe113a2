//! Operators: `Authorization: Bearer <admin token>` on `/admin/api/…`.
//!
//! Tokens come from `SECKILL_ADMIN_TOKEN`: one secret, or a comma-separated list of
//! `name:secret` pairs so that changes can be attributed. No token configured means
//! every admin request is refused: admin endpoints are closed by default.
//!
//! Guessing is limited per client IP by the sign-in lockout ([`super::lockout`]): a
//! token is compared only once its attempt holds a place in the address's count, and
//! every refused token stays counted; when the `admin_auth` policy's threshold (10 by
//! default) is reached, the address is locked out, right tokens included, for the
//! policy's window (5 minutes).

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounter;
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use super::lockout::{Attempt, LockoutLimits, Reservation, SignInLockout};
use crate::configuration::policies::{
    ADMIN_AUTH_FAILURES, ADMIN_AUTH_POLICY, ADMIN_AUTH_WINDOW_MS,
};
use crate::domain::ClientIp;
use crate::limiter::{FailMode, Failover, Limiter};
use crate::metrics::Metrics;
use crate::vocabulary::LimiterMode;
use crate::vocabulary::TokenComparison;

/// The configured admin tokens, each with its name (the audit's `changed_by`); compared in
/// constant time.
pub struct AdminTokens(Vec<(String, SecretString)>);

impl AdminTokens {
    /// The tokens of `SECKILL_ADMIN_TOKEN` (see [`crate::configuration::named_secrets`]).
    pub fn parse(configured: &SecretString) -> Self {
        Self(crate::configuration::named_secrets(configured))
    }

    /// Every configured secret (for the production-safety check of their strength).
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(_, secret)| secret.expose_secret())
    }

    /// The name of the token that matches, comparing in constant time so response
    /// timing does not reveal how much of a guess was right.
    fn authenticate(&self, presented: &str) -> Option<&str> {
        let mut found = None;
        for (name, secret) in &self.0 {
            if bool::from(
                secret
                    .expose_secret()
                    .as_bytes()
                    .ct_eq(presented.as_bytes()),
            ) {
                found = Some(name.as_str());
            }
        }
        found
    }
}

/// Admin tokens plus the lockout of IPs that keep guessing.
pub struct AdminGuard {
    tokens: AdminTokens,
    /// Where the lockout's limits and fail mode come from: the `admin_auth` policy in
    /// force (an operator may change it at runtime like any other).
    limiter: Arc<Limiter>,
    lockout: SignInLockout,
    /// `admin_token_comparisons_total{outcome="accepted"}` and `{outcome="refused"}`.
    accepted: IntCounter,
    refused: IntCounter,
}

/// Where an attempt holds its place while its token is compared.
enum Place {
    /// In Redis's count (the normal way).
    InRedis(Attempt),
    /// In the limiter's fallback limits, while Redis is away (fail mode `local`).
    InProcess { key: String, taken_ms: u64 },
    /// Nowhere: Redis is away and the policy fails open.
    None,
}

/// The policy in force, read per request: its limits, and what a Redis failure means.
struct LockoutPolicy {
    limits: LockoutLimits,
    fail_mode: FailMode,
}

impl AdminGuard {
    /// How long a reserved place counts when its attempt never settles (the process
    /// died in between): long enough for any comparison and Redis call, short enough
    /// that a crash costs nobody a lockout.
    pub const ATTEMPT_LEASE: Duration = Duration::from_secs(10);

    /// The guard over `tokens`, its lockout limits read from `limiter`'s `admin_auth`
    /// policy per request.
    pub fn new(
        tokens: AdminTokens,
        limiter: Arc<Limiter>,
        lockout: SignInLockout,
        metrics: &Metrics,
    ) -> Self {
        let comparisons = |outcome| {
            metrics
                .admin_token_comparisons
                .with_label_values(&[outcome])
        };
        Self {
            tokens,
            limiter,
            lockout,
            accepted: comparisons(TokenComparison::Accepted.label()),
            refused: comparisons(TokenComparison::Refused.label()),
        }
    }

    /// The lockout the `admin_auth` policy asks for: its first rule's threshold and
    /// window; `None` when an operator disabled it; the defaults when the settings
    /// leave the policy out (a missing policy must not mean unlimited guessing), failing
    /// `local` like the policy the settings would have written.
    fn lockout_policy(&self) -> Option<LockoutPolicy> {
        match self.limiter.policy(ADMIN_AUTH_POLICY) {
            Some(policy) if !policy.enabled => None,
            Some(policy) => Some(LockoutPolicy {
                limits: LockoutLimits {
                    failures: policy.rules[0].threshold,
                    window_ms: policy.rules[0].window_ms,
                },
                fail_mode: policy.fail_mode,
            }),
            None => Some(LockoutPolicy {
                limits: LockoutLimits {
                    failures: ADMIN_AUTH_FAILURES,
                    window_ms: ADMIN_AUTH_WINDOW_MS,
                },
                fail_mode: FailMode::Local,
            }),
        }
    }

    /// The operator whose token was presented, if any; counted as one comparison.
    fn compare(&self, presented: Option<&str>) -> Option<Admin> {
        let presented = presented?;
        let matched = self.tokens.authenticate(presented);
        match matched {
            Some(_) => self.accepted.inc(),
            None => self.refused.inc(),
        }
        matched.map(|name| Admin {
            name: name.to_string(),
        })
    }

    /// The operator presenting `presented` (the bearer token, if any) from `ip`, within
    /// the lockout.
    pub async fn authenticate(
        &self,
        ip: ClientIp,
        presented: Option<&str>,
    ) -> Result<Admin, SignInError> {
        let Some(policy) = self.lockout_policy() else {
            return self.compare(presented).ok_or(SignInError::Refused);
        };
        let place = match self.lockout.reserve(ip, policy.limits).await {
            Ok(Reservation::Granted(attempt)) => {
                self.limiter
                    .note_mode(ADMIN_AUTH_POLICY, LimiterMode::Redis);
                Place::InRedis(attempt)
            }
            Ok(Reservation::Refused { retry_after_ms }) => {
                self.limiter
                    .note_mode(ADMIN_AUTH_POLICY, LimiterMode::Redis);
                return Err(SignInError::Locked { retry_after_ms });
            }
            // The limiter's failure path: open compares without a place (the token
            // still has to be right), closed refuses, local counts the address's
            // failures in process at this instance's share.
            Err(e) => {
                let limits = policy.limits;
                let local = || {
                    let key = format!("admin_auth:lockout:{ip}");
                    self.limiter
                        .take_locally(ADMIN_AUTH_POLICY, &key, limits.failures, limits.window_ms)
                        .map(|taken_ms| Place::InProcess { key, taken_ms })
                };
                match self.limiter.fail_over(
                    ADMIN_AUTH_POLICY,
                    policy.fail_mode,
                    &e.to_string(),
                    local,
                ) {
                    Failover::Admit => Place::None,
                    Failover::Refuse => return Err(SignInError::LockoutUnavailable),
                    Failover::Local(Ok(place)) => place,
                    Failover::Local(Err(retry_after_ms)) => {
                        return Err(SignInError::Locked { retry_after_ms })
                    }
                }
            }
        };
        let admin = self.compare(presented);
        match place {
            Place::InRedis(attempt) => {
                self.settle(ip, attempt, admin.is_some(), policy.limits)
                    .await
            }
            // A right token is no failure: its place goes back, as in Redis.
            Place::InProcess { key, taken_ms } if admin.is_some() => {
                self.limiter.give_back(ADMIN_AUTH_POLICY, &key, taken_ms)
            }
            Place::InProcess { .. } | Place::None => {}
        }
        admin.ok_or(SignInError::Refused)
    }

    /// Gives the place back (right token) or records the failure (wrong or no token).
    /// If Redis fails now, the place still counts until its lease ends.
    async fn settle(&self, ip: ClientIp, attempt: Attempt, right: bool, limits: LockoutLimits) {
        let settled = if right {
            self.lockout.release(attempt, limits).await.map(drop)
        } else {
            self.lockout.fail(attempt, limits).await.map(|failed| {
                if let Some(lockout_ms) = failed.locked_for_ms {
                    if failed.failures == limits.failures {
                        tracing::warn!(client.ip = %ip, lockout_ms, "admin sign-in locked after repeated failures");
                    }
                }
            })
        };
        if let Err(e) = settled {
            tracing::warn!(error = %e, "could not settle an admin sign-in attempt");
        }
    }
}

/// An authenticated operator.
#[derive(Debug, Clone)]
pub struct Admin {
    /// The name of the token it signed in with: what the audit records.
    pub name: String,
}

/// Why an admin sign-in was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignInError {
    /// No token, or not a configured one.
    #[error("missing or invalid admin token")]
    Refused,
    /// Too many refused tokens from this address.
    #[error("too many failed sign-ins")]
    Locked {
        /// When the lockout ends, in milliseconds.
        retry_after_ms: u64,
    },
    /// The lockout's store is down and its policy fails closed.
    #[error("the sign-in lockout is unavailable")]
    LockoutUnavailable,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_and_plain_tokens_authenticate_and_empty_config_closes() {
        let tokens = AdminTokens::parse(&SecretString::from("alice:s3cret, plain-token"));
        assert_eq!(tokens.authenticate("s3cret"), Some("alice"));
        assert_eq!(tokens.authenticate("plain-token"), Some("admin"));
        assert_eq!(tokens.authenticate("s3cre"), None);
        assert_eq!(tokens.authenticate(""), None);
        let closed = AdminTokens::parse(&SecretString::from(""));
        assert_eq!(closed.authenticate(""), None);
    }
}
