//! The Redis store behind `Idempotency-Key`: one record per user and key, claimed by
//! `lua/claim_idempotency.lua`.
//!
//! A record is `p|<item>|<order>|<claimed at>` while its request runs and
//! `d|<item>|<status>|<body>` once it has a final answer; the user's live claims are a
//! sorted set beside it (same hash tag), which bounds how many one user holds at once.

use std::time::Duration;

use anyhow::Context;
use redis::Script;
use uuid::Uuid;

use crate::domain::{IdempotencyKey, UserId};
use crate::metrics::RedisPurpose;
use crate::sale::item::ItemId;
use crate::store::redis_store::Request;
use crate::store::RedisStore;

/// What the claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Ours: go ahead, then `complete` or `release`.
    Fresh,
    /// Another request with this key is running, or died. `order` is the order it was
    /// placing; `stale` says it has run longer than a purchase normally takes.
    InProgress {
        /// The order it was placing, if it got that far.
        order: Option<Uuid>,
        /// Whether it has run longer than a purchase normally takes (so it likely died).
        stale: bool,
    },
    /// This key was used for another item.
    Mismatch,
    /// Finished before: answer exactly this.
    Replay {
        /// The status it answered.
        status: u16,
        /// The body it answered, byte for byte.
        body: String,
    },
    /// The user already has the most purchases in flight that one user may.
    TooMany,
}

/// How the key store is tuned (see the `idempotency_*` settings).
#[derive(Debug, Clone, Copy)]
pub struct IdempotencyLimits {
    /// How long a final answer is kept.
    pub answer_ttl: Duration,
    /// How long a claim lives: as long as a purchase can.
    pub claim_ttl: Duration,
    /// Past this age a claim's request is presumed dead.
    pub stale_after: Duration,
    /// Claims one user may hold at once.
    pub max_in_flight: u32,
}

/// The claims of `Idempotency-Key`s in Redis, bounded per user by `limits`.
pub struct Idempotency {
    redis: RedisStore,
    claim: Script,
    limits: IdempotencyLimits,
}

impl Idempotency {
    /// A key store over `redis` (the keys under its prefix).
    pub fn new(redis: RedisStore, limits: IdempotencyLimits) -> Self {
        Self {
            redis,
            claim: Script::new(include_str!("../../../lua/claim_idempotency.lua")),
            limits,
        }
    }

    fn redis_key(&self, user: UserId, key: &IdempotencyKey) -> String {
        format!(
            "{}:{{user:{user}}}:idempotency:{}",
            self.redis.prefix(),
            key.as_str()
        )
    }

    /// The user's live claims (same hash tag as their keys).
    fn in_flight_key(&self, user: UserId) -> String {
        format!(
            "{}:{{user:{user}}}:idempotency-in-flight",
            self.redis.prefix()
        )
    }

    async fn call<'r, T: redis::FromRedisValue>(
        &self,
        request: impl Into<Request<'r>>,
    ) -> anyhow::Result<T> {
        self.redis
            .call(RedisPurpose::Idempotency, request)
            .await
            .context("idempotency key")
    }

    /// Claims `key` for a purchase of `item` that will place order `order`.
    pub async fn claim(
        &self,
        user: UserId,
        key: &IdempotencyKey,
        item: ItemId,
        order: Uuid,
    ) -> anyhow::Result<Claim> {
        let mut invocation = self.claim.prepare_invoke();
        invocation
            .key(self.redis_key(user, key))
            .key(self.in_flight_key(user))
            .arg(format!("{item}|{order}"))
            .arg(self.limits.claim_ttl.as_millis() as u64)
            .arg(self.limits.max_in_flight);
        let (status, previous, now_ms): (i64, String, i64) = self.call(&invocation).await?;
        match status {
            1 => return Ok(Claim::Fresh),
            -1 => return Ok(Claim::TooMany),
            _ => {}
        }
        // A claim sent again after its connection broke (`RedisStore::call`) may find
        // the record its first try wrote: this request's own order id, which no other
        // request carries, so the claim is ours.
        let ours = format!("{item}|{order}");
        if previous
            .strip_prefix("p|")
            .and_then(|rest| rest.rsplit_once('|'))
            .is_some_and(|(claimed, _)| claimed == ours)
        {
            return Ok(Claim::Fresh);
        }
        let mut parts = previous.splitn(4, '|');
        let (state, stored_item) = (parts.next(), parts.next());
        if stored_item != Some(item.to_string().as_str()) {
            return Ok(Claim::Mismatch);
        }
        match (state, parts.next(), parts.next()) {
            (Some("d"), Some(status), Some(body)) => Ok(Claim::Replay {
                status: status.parse().context("stored status")?,
                body: body.to_string(),
            }),
            (_, order, claimed_at) => {
                let age_ms = claimed_at
                    .and_then(|t| t.parse::<i64>().ok())
                    .map(|t| now_ms - t);
                Ok(Claim::InProgress {
                    order: order.and_then(|o| o.parse().ok()),
                    stale: age_ms
                        .is_some_and(|age| age >= self.limits.stale_after.as_millis() as i64),
                })
            }
        }
    }

    /// Stores the final answer for `answer_ttl` and frees the user's in-flight place.
    pub async fn complete(
        &self,
        user: UserId,
        key: &IdempotencyKey,
        item: ItemId,
        status: u16,
        body: &str,
    ) -> anyhow::Result<()> {
        let record = self.redis_key(user, key);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(&record)
            .arg(format!("d|{item}|{status}|{body}"))
            .arg("XX")
            .arg("PX")
            .arg(self.limits.answer_ttl.as_millis() as u64)
            .ignore()
            .zrem(self.in_flight_key(user), &record)
            .ignore();
        self.call(&pipe).await
    }

    /// Frees the key: the answer is not to be replayed.
    pub async fn release(&self, user: UserId, key: &IdempotencyKey) -> anyhow::Result<()> {
        let record = self.redis_key(user, key);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(&record)
            .ignore()
            .zrem(self.in_flight_key(user), &record)
            .ignore();
        self.call(&pipe).await
    }
}
