//! Failed admin sign-ins per address, in Redis (`lua/admin_sign_in.lua`).
//!
//! An attempt reserves its place *before* its token is compared, atomically with the
//! check of the count: refused while recorded failures plus attempts in flight reach the
//! limit. A right token gives its place back, a wrong one turns it into a recorded
//! failure. So a burst of guesses gets exactly as many comparisons as the limit, not as
//! many as arrive before the first failure is counted; and right tokens (the dashboard
//! polling every 2 s) never count.

use std::time::Duration;

use redis::Script;

use crate::domain::ClientIp;
use crate::limiter::Clock;
use crate::metrics::RedisPurpose;
use crate::store::redis_store::RedisCallError;
use crate::store::RedisStore;

/// The admin sign-in's failure counts per address, in Redis (see the module docs).
pub struct SignInLockout {
    redis: RedisStore,
    script: Script,
    clock: Clock,
    /// How long a reserved place counts if its attempt never settles (the process died
    /// in between): far longer than a comparison and a Redis call take.
    lease: Duration,
}

/// How many refused tokens lock an address out, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockoutLimits {
    /// Refused tokens that lock an address out.
    pub failures: u64,
    /// The window they are counted over, and the lockout's length, in milliseconds.
    pub window_ms: u64,
}

/// The answer to [`SignInLockout::reserve`].
#[derive(Debug)]
pub enum Reservation {
    /// Compare the token, then settle the attempt with [`SignInLockout::release`] or
    /// [`SignInLockout::fail`].
    Granted(Attempt),
    /// No place: the address is locked out, or the places left are all taken by
    /// attempts still being compared. Try again in `retry_after_ms`.
    Refused {
        /// When a place may be free again, in milliseconds.
        retry_after_ms: u64,
    },
}

/// A reserved place in the count of an address.
#[derive(Debug)]
#[must_use = "an attempt holds a place until it is settled or its lease ends"]
pub struct Attempt {
    ip: ClientIp,
    id: String,
}

/// Failures recorded after a refused token, and the lockout it started, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed {
    /// Failures recorded for the address now.
    pub failures: u64,
    /// The lockout this failure started, in milliseconds; `None` if none.
    pub locked_for_ms: Option<u64>,
}

impl SignInLockout {
    /// A lockout in `redis`, on `clock`, whose unsettled places count for `lease`.
    pub fn new(redis: RedisStore, clock: Clock, lease: Duration) -> Self {
        Self {
            redis,
            script: Script::new(include_str!("../../lua/admin_sign_in.lua")),
            clock,
            lease,
        }
    }

    /// Takes a place for one attempt from `ip`, unless the limit is reached.
    pub async fn reserve(
        &self,
        ip: ClientIp,
        limits: LockoutLimits,
    ) -> Result<Reservation, RedisCallError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let (status, wait) = self.run("reserve", ip, &id, limits).await?;
        Ok(if status == 1 {
            Reservation::Granted(Attempt { ip, id })
        } else {
            Reservation::Refused {
                retry_after_ms: wait.max(1) as u64,
            }
        })
    }

    /// The token was right: the place is given back.
    pub async fn release(
        &self,
        attempt: Attempt,
        limits: LockoutLimits,
    ) -> Result<(), RedisCallError> {
        self.run("release", attempt.ip, &attempt.id, limits)
            .await
            .map(drop)
    }

    /// The token was wrong: the place becomes a recorded failure.
    pub async fn fail(
        &self,
        attempt: Attempt,
        limits: LockoutLimits,
    ) -> Result<Failed, RedisCallError> {
        let (failures, wait) = self.run("fail", attempt.ip, &attempt.id, limits).await?;
        Ok(Failed {
            failures: failures.max(0) as u64,
            locked_for_ms: (wait > 0).then_some(wait as u64),
        })
    }

    async fn run(
        &self,
        operation: &str,
        ip: ClientIp,
        id: &str,
        limits: LockoutLimits,
    ) -> Result<(i64, i64), RedisCallError> {
        // One hash tag per address: both keys sit in one slot of a cluster.
        let base = format!("{}:{{admin-auth:{ip}}}", self.redis.prefix());
        let now = self
            .clock
            .script_now()
            .0
            .map_or_else(String::new, |ms| ms.to_string());
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(format!("{base}:failures"))
            .key(format!("{base}:in-flight"))
            .arg(operation)
            .arg(id)
            .arg(limits.failures)
            .arg(limits.window_ms)
            .arg(u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX))
            .arg(now);
        // `other`, like every admin call: `limiter` counts the limiter engine's decisions.
        self.redis.call(RedisPurpose::Other, &invocation).await
    }
}
