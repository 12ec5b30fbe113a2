//! What keeps a faltering Postgres from taking the sale down with it: two guards a
//! purchase passes after the limiter admitted it and before its reservation, so a
//! refusal here takes no unit and answers at once.
//!
//! 1. the orders [`breaker`]: after a run of failed or timed-out commits, 503
//!    `ORDERS_UNAVAILABLE` until a probe's commit succeeds (Postgres is gone: waiting
//!    for a commit timeout per purchase would only hold a unit and a connection);
//! 2. load [`shedding`]: at most `limit` purchases in flight, the limit following their
//!    latency ([`gradient`]); the excess answers 503 `OVERLOADED` (Postgres is slow:
//!    queueing more orders behind it would only make every order slower).
//!
//! Both answer with `Retry-After`. Both are per instance: each instance learns of a
//! slow or failing Postgres from its own commits.

pub mod breaker;
pub mod gradient;
pub mod shedding;

use tokio::time::Instant;

use self::breaker::{Breaker, BreakerSettings, Clearance};
use self::gradient::GradientSettings;
use self::shedding::{Permit, Shedder};
use super::SaleError;
use crate::metrics::Metrics;
use crate::vocabulary::BreakerState;

/// The settings of both guards; `shedding` `None` turns shedding off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OverloadSettings {
    /// Load shedding's settings; `None` turns it off.
    pub shedding: Option<GradientSettings>,
    /// The orders breaker's settings.
    pub breaker: BreakerSettings,
}

/// The breaker and the shedder of this instance.
pub struct Overload {
    breaker: Breaker,
    shedder: Shedder,
}

/// What a purchase holds while it runs past the guards: its place among those in
/// flight and the breaker's clearance. Dropping it gives both back.
pub struct Admitted<'a> {
    clearance: Clearance<'a>,
    permit: Permit<'a>,
}

impl Overload {
    /// Refuses settings the limit's formula cannot work with (the error names the
    /// setting).
    pub fn new(settings: OverloadSettings, metrics: &Metrics) -> anyhow::Result<Self> {
        if let Some(shedding) = &settings.shedding {
            shedding.check().map_err(anyhow::Error::msg)?;
        }
        let now = Instant::now();
        Ok(Self {
            breaker: Breaker::new(settings.breaker, metrics),
            shedder: Shedder::new(settings.shedding, metrics, now),
        })
    }

    /// Lets a purchase through at `now`, the breaker first (an open breaker takes no
    /// place in flight), or answers its refusal.
    pub fn admit(&self, now: Instant) -> Result<Admitted<'_>, SaleError> {
        let clearance = self
            .breaker
            .check(now)
            .map_err(|retry_after| SaleError::OrdersUnavailable { retry_after })?;
        // A probe shed here is handed on when its clearance drops.
        let permit = self.shedder.try_acquire(now).ok_or(SaleError::Overloaded)?;
        Ok(Admitted { clearance, permit })
    }

    /// Where the orders breaker stands.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// Purchases past the guards and not ended.
    pub fn in_flight(&self) -> u32 {
        self.shedder.in_flight()
    }
}

impl Admitted<'_> {
    /// The purchase's commit answered at `now`; `healthy` unless it failed or timed
    /// out. Its latency is a sample for the limit.
    pub fn commit_answered(&mut self, healthy: bool, now: Instant) {
        self.permit.commit_answered(now);
        self.clearance.commit_answered(healthy, now);
    }
}
