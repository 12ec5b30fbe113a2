//! The operator's blocks: a user or an address refused 403 `BLOCKED` for a chosen time,
//! on every instance from the change's answer on (docs/history.md, "Offenders and
//! blocks").
//!
//! - **Stored** in Postgres (`blocks`, and a `block_audit` row per change, in one
//!   transaction). Changes take one advisory lock, so their audit ids, which are the
//!   blocks' **version**, are handed out in commit order: an instance that read version
//!   `v` and then the rows has every change up to `v`.
//! - **Announced** by raising `<prefix>:{blocks}:version` to the change's version
//!   (`lua/blocks_version.lua`). Every instance polls it every `history.block_poll_ms`, reloads
//!   the rows into its [`Blocklist`] when it moved (and every [`FULL_RELOAD`] anyway,
//!   every [`OUTAGE_RELOAD`] while Redis cannot say), and records the version it applied
//!   in `<prefix>:{blocks}:applied:<instance>` (expiring: a dead instance's goes).
//! - **Confirmed**: the change's answer waits until every instance beating in the
//!   limiter's heartbeat set (`limiter::peers`) has recorded the change's version or a
//!   later one, at most [`CONFIRM_WITHIN`]; past it the answer names the instances that
//!   had not confirmed (a dead instance stays in the set for three heartbeats).
//! - **Values** are normalised as the limiter keys them: a user id as `UserId` parses it,
//!   an address as `ClientIp` keys it (an IPv6 address by its /64). Loopback and the
//!   trusted proxies cannot be blocked: every request through a proxy would be.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Script;
use sqlx::PgPool;

use super::block_rules::REASON_MAX_CHARS;
pub use super::block_rules::{
    Applied, Block, BlockAudit, BlockError, BlockLimits, Invalid, NewBlock, Target,
};
use crate::background::Ticks;
use crate::domain::is_printable;
use crate::limiter::blocklist::{Blocklist, Blocks};
use crate::limiter::Limiter;
use crate::metrics::RedisPurpose;
use crate::store::RedisStore;

/// Every instance rereads the blocks (and sweeps the expired) this often regardless, in
/// case the version key itself was lost.
pub const FULL_RELOAD: Duration = Duration::from_secs(30);
/// How often the blocks are reread while Redis cannot tell their version.
pub const OUTAGE_RELOAD: Duration = Duration::from_secs(5);
/// How long a change's answer waits for every live instance to confirm it.
pub const CONFIRM_WITHIN: Duration = Duration::from_secs(2);
/// How long an instance's applied version lives in Redis without a poll refreshing it,
/// at least (three polls, when they are further apart).
const APPLIED_TTL_MS: u64 = 10_000;
/// The advisory lock every change takes, so versions are handed out in commit order.
const CHANGE_LOCK: i64 = 0x626c_6f63_6b73; // "blocks"
/// The blocks in Postgres, their version in Redis, and this instance's table.
pub struct BlockStore {
    pool: PgPool,
    redis: RedisStore,
    limiter: Arc<Limiter>,
    list: Arc<Blocklist>,
    limits: BlockLimits,
    /// How often this instance asks Redis for the blocks' version
    /// (`history.block_poll_ms`).
    poll_every: Duration,
    script: Script,
}

impl BlockStore {
    /// Over `pool` and `redis`, filling `list`; `limiter` names this instance and the
    /// live ones.
    pub fn new(
        pool: PgPool,
        redis: RedisStore,
        limiter: Arc<Limiter>,
        list: Arc<Blocklist>,
        limits: BlockLimits,
        poll_every: Duration,
    ) -> Self {
        Self {
            pool,
            redis,
            limiter,
            list,
            limits,
            poll_every: poll_every.max(Duration::from_millis(1)),
            script: Script::new(include_str!("../../lua/blocks_version.lua")),
        }
    }

    /// The bounds changes are held to.
    pub fn limits(&self) -> &BlockLimits {
        &self.limits
    }

    /// Checks an operator's block: the target, `seconds` within 1 and the bound, a
    /// printable reason of at most [`REASON_MAX_CHARS`].
    pub fn parse(
        &self,
        kind: &str,
        value: &str,
        seconds: i64,
        reason: &str,
    ) -> Result<NewBlock, Invalid> {
        let target = Target::parse(kind, value, &self.limits.guarded)?;
        let max = self.limits.max_secs.min(i64::MAX as u64) as i64;
        if !(1..=max).contains(&seconds) {
            return Err(Invalid::new(
                "seconds",
                format!("seconds is between 1 and {max} (history.block_max_secs)"),
            ));
        }
        let reason = reason.trim();
        if reason.chars().count() > REASON_MAX_CHARS || !is_printable(reason) {
            return Err(Invalid::new(
                "reason",
                format!("reason is at most {REASON_MAX_CHARS} printable characters"),
            ));
        }
        Ok(NewBlock {
            target,
            seconds,
            reason: reason.to_string(),
        })
    }

    /// Blocks (or blocks again, for a new time) and audits it as `who`; answers once
    /// every live instance applied it, or the deadline passed.
    pub async fn block(&self, block: &NewBlock, who: &str) -> Result<(Block, Applied), BlockError> {
        let (kind, value) = (block.target.kind(), block.target.value());
        let mut tx = self.pool.begin().await?;
        sqlx::query!("SELECT pg_advisory_xact_lock($1)", CHANGE_LOCK)
            .execute(&mut *tx)
            .await?;
        sqlx::query!("DELETE FROM blocks WHERE until <= now()")
            .execute(&mut *tx)
            .await?;
        let others = sqlx::query_scalar!(
            r#"SELECT count(*) AS "n!" FROM blocks WHERE NOT (kind = $1 AND value = $2)"#,
            kind,
            value
        )
        .fetch_one(&mut *tx)
        .await?;
        if others >= self.limits.max_blocks as i64 {
            return Err(Invalid::new(
                "value",
                format!(
                    "{others} blocks are in force, the most history.blocks_max allows: lift one first"
                ),
            )
            .into());
        }
        let row = sqlx::query!(
            r#"INSERT INTO blocks (kind, value, until, reason, created_by)
               VALUES ($1, $2, now() + $3::bigint * interval '1 second', $4, $5)
               ON CONFLICT (kind, value) DO UPDATE
                 SET until = excluded.until, reason = excluded.reason,
                     created_by = excluded.created_by, created_at = now()
               RETURNING until, created_at"#,
            kind,
            value,
            block.seconds,
            block.reason,
            who
        )
        .fetch_one(&mut *tx)
        .await?;
        let version = sqlx::query_scalar!(
            "INSERT INTO block_audit (kind, value, action, seconds, reason, changed_by)
             VALUES ($1, $2, 'block', $3, $4, $5) RETURNING id",
            kind,
            value,
            block.seconds,
            block.reason,
            who
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::info!(block.kind = kind, changed_by = who, version, "blocked");
        let stored = Block {
            kind: kind.into(),
            value,
            until: row.until,
            reason: block.reason.clone(),
            created_by: who.into(),
            created_at: row.created_at,
        };
        Ok((stored, self.spread(version).await))
    }

    /// Lifts a block in force and audits it as `who`; answers as [`Self::block`] does.
    pub async fn unblock(&self, target: Target, who: &str) -> Result<Applied, BlockError> {
        let (kind, value) = (target.kind(), target.value());
        let mut tx = self.pool.begin().await?;
        sqlx::query!("SELECT pg_advisory_xact_lock($1)", CHANGE_LOCK)
            .execute(&mut *tx)
            .await?;
        let lifted = sqlx::query!(
            "DELETE FROM blocks WHERE kind = $1 AND value = $2 RETURNING until > now() AS live",
            kind,
            value
        )
        .fetch_optional(&mut *tx)
        .await?;
        if lifted.is_none_or(|row| row.live != Some(true)) {
            return Err(BlockError::NotFound);
        }
        let version = sqlx::query_scalar!(
            "INSERT INTO block_audit (kind, value, action, changed_by)
             VALUES ($1, $2, 'unblock', $3) RETURNING id",
            kind,
            value,
            who
        )
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        tracing::info!(block.kind = kind, changed_by = who, version, "unblocked");
        Ok(self.spread(version).await)
    }

    /// The blocks in force, the newest first.
    pub async fn list(&self) -> anyhow::Result<Vec<Block>> {
        Ok(sqlx::query_as!(
            Block,
            "SELECT kind, value, until, reason, created_by, created_at FROM blocks
             WHERE until > now() ORDER BY created_at DESC, kind, value"
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// The newest `limit` changes.
    pub async fn audit(&self, limit: i64) -> anyhow::Result<Vec<BlockAudit>> {
        Ok(sqlx::query_as!(
            BlockAudit,
            "SELECT id, kind, value, action, seconds, reason, changed_by, changed_at
             FROM block_audit ORDER BY id DESC LIMIT $1",
            limit
        )
        .fetch_all(&self.pool)
        .await?)
    }

    /// Rereads the blocks into this instance's table; answers the version in force. The
    /// version first, then the rows: the rows hold every change up to it (module docs);
    /// of two reloads that overlap, the one read at the later version stays.
    pub async fn reload(&self) -> anyhow::Result<i64> {
        let version =
            sqlx::query_scalar!(r#"SELECT COALESCE(max(id), 0) AS "v!" FROM block_audit"#)
                .fetch_one(&self.pool)
                .await?;
        let rows = sqlx::query!(
            "SELECT kind, value, (extract(epoch FROM until) * 1000)::bigint AS until_ms
             FROM blocks WHERE until > now()"
        )
        .fetch_all(&self.pool)
        .await?;
        let mut blocks = Blocks {
            version,
            ..Blocks::default()
        };
        for row in rows {
            let until = row.until_ms.unwrap_or(0);
            match Target::stored(&row.kind, &row.value) {
                Some(Target::User(user)) => {
                    blocks.users.insert(user, until);
                }
                Some(Target::Ip(ip)) => {
                    blocks.ips.insert(ip, until);
                }
                None => tracing::warn!(
                    block.kind = row.kind,
                    "a stored block's value does not parse"
                ),
            }
        }
        Ok(self.list.replace(blocks))
    }

    /// Deletes the blocks that ended.
    pub async fn sweep(&self) -> anyhow::Result<u64> {
        Ok(sqlx::query!("DELETE FROM blocks WHERE until <= now()")
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    fn version_key(&self) -> String {
        format!("{}:{{blocks}}:version", self.redis.prefix())
    }

    fn applied_key(&self, instance: &str) -> String {
        format!("{}:{{blocks}}:applied:{instance}", self.redis.prefix())
    }

    /// Announces `version` (0: none) and records this instance's applied version;
    /// answers the version in Redis.
    async fn exchange(&self, version: i64) -> anyhow::Result<i64> {
        let mut invocation = self.script.prepare_invoke();
        invocation
            .key(self.version_key())
            .key(self.applied_key(self.limiter.instance()))
            .arg(version)
            .arg(self.list.version())
            .arg(APPLIED_TTL_MS.max(3 * self.poll_every.as_millis() as u64));
        Ok(self.redis.call(RedisPurpose::Other, &invocation).await?)
    }

    /// Announces `version`, applies it here, and waits for the live instances.
    async fn spread(&self, version: i64) -> Applied {
        if let Err(e) = self.reload().await {
            tracing::warn!(error = %format!("{e:#}"), "could not reload the blocks here");
        }
        if let Err(e) = self.exchange(version).await {
            // The instances' periodic reload still picks the change up.
            tracing::warn!(error = %format!("{e:#}"), "could not announce a block change");
            return Applied {
                version,
                unconfirmed: vec!["unknown".into()],
            };
        }
        let start = Instant::now();
        loop {
            let unconfirmed = match self.unconfirmed(version).await {
                Ok(unconfirmed) => unconfirmed,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "could not ask which instances applied a block change");
                    vec!["unknown".into()]
                }
            };
            if unconfirmed.is_empty() || start.elapsed() >= CONFIRM_WITHIN {
                return Applied {
                    version,
                    unconfirmed,
                };
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The live instances that have not recorded `version` or a later one.
    async fn unconfirmed(&self, version: i64) -> anyhow::Result<Vec<String>> {
        let live = self.limiter.live_instances().await?;
        if live.is_empty() {
            return Ok(live);
        }
        let mut get = redis::cmd("MGET");
        for instance in &live {
            get.arg(self.applied_key(instance));
        }
        let applied: Vec<Option<i64>> = self.redis.call(RedisPurpose::Other, &get).await?;
        Ok(live
            .into_iter()
            .zip(applied)
            .filter(|(_, applied)| applied.is_none_or(|applied| applied < version))
            .map(|(instance, _)| instance)
            .collect())
    }

    /// Polls the version every `history.block_poll_ms` and reloads when it moved; sweeps and
    /// reloads every [`FULL_RELOAD`] regardless, and every [`OUTAGE_RELOAD`] while Redis
    /// cannot say.
    pub async fn watch(self: Arc<Self>) {
        let mut since_reload = Duration::ZERO;
        let mut ticks = Ticks::new("block watcher", self.poll_every);
        loop {
            ticks.next().await;
            since_reload += self.poll_every;
            let result = match self.exchange(0).await {
                Ok(version) => {
                    let applied = self.list.version();
                    if version > applied || since_reload >= FULL_RELOAD {
                        since_reload = Duration::ZERO;
                        self.refresh().await
                    } else {
                        Ok(())
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %format!("{e:#}"), "block version unavailable");
                    if since_reload >= OUTAGE_RELOAD {
                        since_reload = Duration::ZERO;
                        self.reload().await.map(drop)
                    } else {
                        Ok(())
                    }
                }
            };
            ticks.report(result.map_err(|e| e.context("could not reload the blocks")));
        }
    }

    /// Sweeps, reloads, and records the version applied at once, so a change waiting
    /// for this instance hears of it now rather than at the next poll.
    async fn refresh(&self) -> anyhow::Result<()> {
        self.sweep().await?;
        self.reload().await?;
        self.exchange(0).await.map(drop)
    }
}
