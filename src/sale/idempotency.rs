//! `Idempotency-Key` for `POST /seckill`: a retried purchase (after a timeout, a double
//! tap) gets the first attempt's answer instead of a second order or a second charge
//! against the limiter.
//!
//! A key is scoped to the user and kept for `idempotency_ttl_secs`. It is claimed with
//! one `SET … NX GET` before the limiter, so concurrent duplicates are decided by Redis:
//! exactly one proceeds, the others see it in progress. Final answers (200, 404 and the
//! 409 sale answers) are stored and replayed byte for byte; anything the client may
//! retry (400, 401, 429, 5xx) releases the claim.

use std::time::Duration;

use anyhow::Context;

use super::item::ItemId;
use crate::domain::UserId;
use crate::metrics::RedisPurpose;
use crate::store::RedisStore;

/// 1 to 64 characters of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Idempotency-Key must be 1 to 64 characters of A-Z a-z 0-9 _ -")]
pub struct InvalidIdempotencyKey;

impl IdempotencyKey {
    pub fn parse(raw: &str) -> Result<Self, InvalidIdempotencyKey> {
        let valid = (1..=64).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if valid {
            Ok(Self(raw.to_string()))
        } else {
            Err(InvalidIdempotencyKey)
        }
    }
}

/// What the claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Ours: go ahead, then `complete` or `release`.
    Fresh,
    /// Another request with this key is still running.
    InProgress,
    /// This key was used for another item.
    Mismatch,
    /// Finished before: answer exactly this.
    Replay { status: u16, body: String },
}

pub struct Idempotency {
    redis: RedisStore,
    ttl: Duration,
}

impl Idempotency {
    pub fn new(redis: RedisStore, ttl: Duration) -> Self {
        Self { redis, ttl }
    }

    fn redis_key(&self, user: UserId, key: &IdempotencyKey) -> String {
        format!(
            "{}:{{user:{user}}}:idempotency:{}",
            self.redis.prefix(),
            key.0
        )
    }

    async fn call<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> anyhow::Result<T> {
        self.redis
            .call(RedisPurpose::Idempotency, &cmd)
            .await
            .context("idempotency key")
    }

    /// Stored values: `p|<item>` while in progress, `d|<item>|<status>|<body>` when done.
    pub async fn claim(
        &self,
        user: UserId,
        key: &IdempotencyKey,
        item: ItemId,
    ) -> anyhow::Result<Claim> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.redis_key(user, key))
            .arg(format!("p|{item}"))
            .arg("NX")
            .arg("GET")
            .arg("PX")
            .arg(self.ttl.as_millis() as u64);
        let previous: Option<String> = self.call(cmd).await?;
        let Some(previous) = previous else {
            return Ok(Claim::Fresh);
        };
        let mut parts = previous.splitn(4, '|');
        let (state, stored_item) = (parts.next(), parts.next());
        if stored_item != Some(item.to_string().as_str()) {
            return Ok(Claim::Mismatch);
        }
        match (
            state,
            parts.next().and_then(|s| s.parse().ok()),
            parts.next(),
        ) {
            (Some("d"), Some(status), Some(body)) => Ok(Claim::Replay {
                status,
                body: body.to_string(),
            }),
            _ => Ok(Claim::InProgress),
        }
    }

    pub async fn complete(
        &self,
        user: UserId,
        key: &IdempotencyKey,
        item: ItemId,
        status: u16,
        body: &str,
    ) -> anyhow::Result<()> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.redis_key(user, key))
            .arg(format!("d|{item}|{status}|{body}"))
            .arg("XX")
            .arg("PX")
            .arg(self.ttl.as_millis() as u64);
        self.call::<Option<String>>(cmd).await.map(drop)
    }

    pub async fn release(&self, user: UserId, key: &IdempotencyKey) -> anyhow::Result<()> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.redis_key(user, key));
        self.call::<i64>(cmd).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_and_plain() {
        assert!(IdempotencyKey::parse("a").is_ok());
        assert!(IdempotencyKey::parse("Buy_2026-11-30_abc").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(64)).is_ok());
        for bad in ["", "a b", "a|b", "a:b", "ключ", &"k".repeat(65)] {
            assert_eq!(
                IdempotencyKey::parse(bad),
                Err(InvalidIdempotencyKey),
                "{bad:?}"
            );
        }
    }
}
