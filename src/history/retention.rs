//! What the history forgets: every ten minutes each instance deletes
//! the per-minute rows older than `retention_days`, the refusal samples older than
//! `sample_retention_days`, and the fold's keys (`history_records`) past both
//! `retention_days` and the oldest entry the stream still holds: any record the stream
//! can still deliver was appended after that entry, so it was folded (if it was) after
//! it too, and its key is kept. Each table in batches of [`BATCH`] rows, at most
//! `BATCHES` a round, so a round after a long pause never holds Postgres for long.
//! Every instance runs it: two rounds at once delete each row once (the second finds
//! it gone), and a round is a few statements every ten minutes.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use redis::Value;
use sqlx::PgPool;

use crate::configuration::HistorySettings;
use crate::metrics::RedisPurpose;
use crate::stats::record;
use crate::store::RedisStore;

/// How often a round runs (its first, one period after the start).
pub const EVERY: Duration = Duration::from_secs(600);

/// Rows one statement deletes at most.
pub const BATCH: i64 = 5_000;

/// Statements a round runs per table at most: 100 000 rows a table every ten minutes,
/// far more than a fleet writes.
const BATCHES: usize = 20;

/// How much Redis's clock (the stream's ids) and Postgres's (`folded_at`) may disagree
/// without a key the stream could still deliver being deleted.
const CLOCK_SLACK: chrono::Duration = chrono::Duration::hours(1);

/// The history's retention (see the module docs).
pub struct Retention {
    pool: PgPool,
    redis: RedisStore,
    days: i32,
    sample_days: i32,
}

/// Rows one round deleted, by table.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// `history_items`, `history_decisions`, `history_rooms` and `history_hitters`.
    pub minutes: u64,
    /// `refusal_samples`.
    pub samples: u64,
    /// `history_records`.
    pub records: u64,
}

impl Retention {
    /// Deletes from `pool` what `settings` keep no longer; `redis` holds the stream.
    pub fn new(pool: PgPool, redis: RedisStore, settings: &HistorySettings) -> Self {
        let days = |d: u32| i32::try_from(d).unwrap_or(i32::MAX);
        Self {
            pool,
            redis,
            days: days(settings.retention_days),
            sample_days: days(settings.sample_retention_days),
        }
    }

    /// Runs forever, a round every [`EVERY`], the first one period after the start.
    pub async fn run(self) {
        tokio::time::sleep(EVERY).await;
        let retention = self;
        crate::background::every("history retention", EVERY, || async {
            retention.round().await.map(drop)
        })
        .await
    }

    /// One round: each table until nothing is left to delete or `BATCHES` statements
    /// ran.
    pub async fn round(&self) -> anyhow::Result<Deleted> {
        let mut deleted = Deleted::default();
        for table in [Table::Items, Table::Decisions, Table::Rooms, Table::Hitters] {
            deleted.minutes += self.drain(table, None).await?;
        }
        deleted.samples = self.drain(Table::Samples, None).await?;
        let oldest = self.oldest_in_stream().await?;
        let keep_from = oldest.map(|at| at - CLOCK_SLACK);
        deleted.records = self.drain(Table::Records, keep_from).await?;
        Ok(deleted)
    }

    async fn drain(&self, table: Table, keep_from: Option<DateTime<Utc>>) -> anyhow::Result<u64> {
        let mut total = 0;
        for _ in 0..BATCHES {
            let n = self
                .delete(table, keep_from)
                .await
                .with_context(|| format!("history retention: {table:?}"))?;
            total += n;
            if n < BATCH as u64 {
                break;
            }
        }
        Ok(total)
    }

    /// One bounded delete of `table`'s expired rows.
    async fn delete(
        &self,
        table: Table,
        keep_from: Option<DateTime<Utc>>,
    ) -> Result<u64, sqlx::Error> {
        let (days, samples) = (self.days, self.sample_days);
        let done = match table {
            Table::Items => {
                sqlx::query!(
                    "DELETE FROM history_items WHERE ctid = ANY(ARRAY(
                   SELECT ctid FROM history_items
                   WHERE minute < now() - make_interval(days => $1) LIMIT $2))",
                    days,
                    BATCH
                )
                .execute(&self.pool)
                .await?
            }
            Table::Decisions => {
                sqlx::query!(
                    "DELETE FROM history_decisions WHERE ctid = ANY(ARRAY(
                   SELECT ctid FROM history_decisions
                   WHERE minute < now() - make_interval(days => $1) LIMIT $2))",
                    days,
                    BATCH
                )
                .execute(&self.pool)
                .await?
            }
            Table::Rooms => {
                sqlx::query!(
                    "DELETE FROM history_rooms WHERE ctid = ANY(ARRAY(
                   SELECT ctid FROM history_rooms
                   WHERE minute < now() - make_interval(days => $1) LIMIT $2))",
                    days,
                    BATCH
                )
                .execute(&self.pool)
                .await?
            }
            Table::Hitters => {
                sqlx::query!(
                    "DELETE FROM history_hitters WHERE ctid = ANY(ARRAY(
                   SELECT ctid FROM history_hitters
                   WHERE minute < now() - make_interval(days => $1) LIMIT $2))",
                    days,
                    BATCH
                )
                .execute(&self.pool)
                .await?
            }
            Table::Samples => {
                sqlx::query!(
                    "DELETE FROM refusal_samples WHERE ctid = ANY(ARRAY(
                   SELECT ctid FROM refusal_samples
                   WHERE at < now() - make_interval(days => $1) LIMIT $2))",
                    samples,
                    BATCH
                )
                .execute(&self.pool)
                .await?
            }
            // LEAST ignores a NULL: with the stream empty, the retention alone.
            Table::Records => {
                sqlx::query!(
                    "DELETE FROM history_records WHERE ctid = ANY(ARRAY(
                   SELECT ctid FROM history_records
                   WHERE folded_at < LEAST(now() - make_interval(days => $1), $3) LIMIT $2))",
                    days,
                    BATCH,
                    keep_from,
                )
                .execute(&self.pool)
                .await?
            }
        };
        Ok(done.rows_affected())
    }

    /// When the stream's oldest entry was appended (its id's milliseconds): the oldest
    /// record it can still deliver. `None` when it is empty.
    async fn oldest_in_stream(&self) -> anyhow::Result<Option<DateTime<Utc>>> {
        let mut first = redis::cmd("XRANGE");
        first
            .arg(record::stream_key(self.redis.prefix()))
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1);
        let reply: Value = self
            .redis
            .call(RedisPurpose::Other, &first)
            .await
            .context("history retention: the stream's oldest entry")?;
        let Value::Array(entries) = reply else {
            return Ok(None);
        };
        let Some(Value::Array(entry)) = entries.first() else {
            return Ok(None);
        };
        let id = match entry.first() {
            Some(Value::BulkString(id)) => String::from_utf8_lossy(id).into_owned(),
            other => anyhow::bail!("XRANGE answered an entry id {other:?}"),
        };
        let ms = id
            .split_once('-')
            .and_then(|(ms, _)| ms.parse::<i64>().ok())
            .with_context(|| format!("a stream id {id:?}"))?;
        Ok(DateTime::from_timestamp_millis(ms))
    }
}

/// The tables a round deletes from.
#[derive(Debug, Clone, Copy)]
enum Table {
    Items,
    Decisions,
    Rooms,
    Hitters,
    Samples,
    Records,
}
