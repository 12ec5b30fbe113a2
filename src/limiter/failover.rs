//! What a failed call to the backend does: the policy's fail mode answers. The one
//! failure path, for the limiter's decisions and the admin lockout alike (its counts live
//! in Redis too, and its `admin_auth` policy has a fail mode like any other).

use super::burst_log::BurstLog;
use super::installed::Enforced;
use crate::vocabulary::{FailMode, LimiterMode};

/// What a fail mode made of a failure.
#[derive(Debug, PartialEq, Eq)]
pub enum Failover<T> {
    /// `open`: let the request through, uncounted.
    Admit,
    /// `closed`: refuse it (503 `LIMITER_UNAVAILABLE`, the lockout's 503).
    Refuse,
    /// `local`: what the in-process count answered.
    Local(T),
}

/// The fail modes' metrics and logs, one burst log per mode for every policy.
pub(super) struct FailurePath {
    open_log: BurstLog,
    closed_log: BurstLog,
    local_log: BurstLog,
}

impl FailurePath {
    pub(super) fn new() -> Self {
        Self {
            open_log: BurstLog::new("failing open"),
            closed_log: BurstLog::new("failing closed"),
            local_log: BurstLog::new("deciding locally (fallback limits)"),
        }
    }

    /// Applies `fail_mode` to a failure of `policy` (its series when it is installed):
    /// notes the mode, counts and logs it once per burst; `local` counts in process.
    pub(super) fn fail_over<T>(
        &self,
        enforced: Option<&Enforced>,
        policy: &str,
        fail_mode: FailMode,
        failure: &str,
        local: impl FnOnce() -> T,
    ) -> Failover<T> {
        if let Some(enforced) = enforced {
            enforced.decided_in(LimiterMode::Failing(fail_mode));
        }
        match fail_mode {
            FailMode::Open => {
                if let Some(enforced) = enforced {
                    enforced.fail_open.inc();
                }
                self.open_log.warn(policy, failure);
                Failover::Admit
            }
            FailMode::Closed => {
                if let Some(enforced) = enforced {
                    enforced.fail_closed.inc();
                }
                self.closed_log.warn(policy, failure);
                Failover::Refuse
            }
            FailMode::Local => {
                self.local_log.warn(policy, failure);
                Failover::Local(local())
            }
        }
    }
}
