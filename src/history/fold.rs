//! The fold: every instance is a consumer of the decision stream's group
//! (`stats::record::GROUP`), under a name of its own, random per process. Once a period
//! it reads a batch of records no consumer has had (`XREADGROUP … >`), adds the records
//! Postgres has not seen to the per-minute rows (`minute_rows`, keyed by the record's
//! instance and second), and only then acknowledges and deletes the entries (`XACK`,
//! `XDEL`), so the stream's length is the backlog. Every half `claim_idle_ms` it also
//! takes the entries another consumer read and left unacknowledged that long
//! (`XAUTOCLAIM`): that consumer died between its read and its acknowledgement, and its
//! entries come here out of order, some perhaps folded already, which the key makes
//! harmless. A batch this instance failed to fold stays pending on it and is read
//! again (`XREADGROUP … 0`) at the next pass. docs/history.md, "The fold into Postgres".

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use redis::Value;
use sqlx::PgPool;

use super::minute_rows;
use crate::background::Ticks;
use crate::configuration::HistorySettings;
use crate::metrics::{Metrics, RedisPurpose};
use crate::stats::record::{self, SecondRecord};
use crate::store::redis_store::RedisCallError;
use crate::store::RedisStore;

/// Batches one pass reads at most from the new entries: a backlog (Postgres was away)
/// drains at up to this many batches a period, and a pass never runs unbounded.
const BATCHES_PER_PASS: usize = 10;

/// A consumer with nothing pending and idle this long leaves the group: each process is
/// a consumer of its own, and every restart would otherwise leave a name behind.
const FORGET_CONSUMER_AFTER_MS: i64 = 3_600_000;

/// The fold of the decision stream into Postgres, one per instance (see the module docs).
pub struct Fold {
    redis: RedisStore,
    pool: PgPool,
    metrics: Arc<Metrics>,
    /// `stats::record::stream_key` of this deployment's prefix.
    key: String,
    /// This process's name in the group.
    consumer: String,
    batch: usize,
    every: Duration,
    claim_idle: Duration,
}

/// What one pass carries to the next.
struct Progress {
    /// The group exists as far as this instance knows (it is made again when a read
    /// says it is gone: Redis restarted without its data).
    group_ready: bool,
    /// Entries this consumer read may be pending unfolded (a failed pass).
    own_pending: bool,
    last_claim: Option<Instant>,
    /// Where the next `XAUTOCLAIM` goes on from.
    claim_cursor: String,
}

/// One stream entry as delivered.
enum Delivered {
    Record(Box<SecondRecord>),
    /// Unreadable: logged, counted, acknowledged and deleted, never retried.
    Malformed(String),
    /// Deleted after it was delivered (a consumer's own pending ones are read back
    /// without their fields): only acknowledged.
    Gone,
}

impl Fold {
    /// Reads `redis`'s stream of this deployment into `pool`, as `settings` say.
    pub fn new(
        redis: RedisStore,
        pool: PgPool,
        metrics: Arc<Metrics>,
        settings: &HistorySettings,
    ) -> Self {
        Self {
            key: record::stream_key(redis.prefix()),
            consumer: uuid::Uuid::new_v4().simple().to_string(),
            redis,
            pool,
            metrics,
            batch: settings.fold_batch.max(1),
            every: Duration::from_millis(settings.fold_every_ms),
            claim_idle: Duration::from_millis(settings.claim_idle_ms.max(1)),
        }
    }

    /// Runs forever: a pass every `fold_every_ms`, a failed one logged and its entries
    /// read again at the next. With `fold_every_ms` 0 this instance does not fold (the
    /// others do, or a fleet keeps its folding on a few instances): it returns at once.
    pub async fn run(self: Arc<Self>) {
        if self.every.is_zero() {
            tracing::info!("history fold off on this instance (fold_every_ms = 0)");
            return;
        }
        let mut progress = Progress {
            group_ready: false,
            own_pending: false,
            last_claim: None,
            claim_cursor: "0-0".into(),
        };
        let mut ticks = Ticks::new("history fold", self.every);
        loop {
            ticks.next().await;
            let pass = self.pass(&mut progress).await;
            if let Err(e) = &pass {
                progress.own_pending = true;
                progress.group_ready &= !redis_code_is(e, "NOGROUP");
            }
            ticks.report(pass);
        }
    }

    /// What is pending on this consumer, then what is claimable (when due), then the
    /// new entries, a batch at a time.
    async fn pass(&self, progress: &mut Progress) -> anyhow::Result<()> {
        if !progress.group_ready {
            self.create_group().await?;
            progress.group_ready = true;
        }
        if progress.own_pending {
            let entries = self.read("0").await?;
            let full = entries.len() >= self.batch;
            self.fold(entries).await?;
            progress.own_pending = full;
        }
        let claim_every = self.claim_idle / 2;
        if progress
            .last_claim
            .is_none_or(|last| last.elapsed() >= claim_every)
        {
            let (cursor, entries) = self.claim(&progress.claim_cursor).await?;
            progress.last_claim = Some(Instant::now());
            progress.claim_cursor = cursor;
            self.fold(entries).await?;
            self.forget_idle_consumers().await?;
        }
        for _ in 0..BATCHES_PER_PASS {
            let entries = self.read(">").await?;
            let full = entries.len() >= self.batch;
            self.fold(entries).await?;
            if !full {
                break;
            }
        }
        Ok(())
    }

    /// The group, made from the stream's first entry (`0`, not `$`): entries in the
    /// stream are exactly those not folded yet (the fold deletes what it folded), so a
    /// group made after records were appended (the first start of a version with the
    /// fold beside one that writes, a group lost while the stream stayed) folds them
    /// instead of skipping them, and the key makes any already folded harmless.
    async fn create_group(&self) -> anyhow::Result<()> {
        let mut create = redis::cmd("XGROUP");
        create
            .arg("CREATE")
            .arg(&self.key)
            .arg(record::GROUP)
            .arg("0")
            .arg("MKSTREAM");
        match self.redis.call::<()>(RedisPurpose::Other, &create).await {
            Err(e) if e_code(&e) == Some("BUSYGROUP") => Ok(()),
            answer => answer.context("creating the history group"),
        }
    }

    /// `XREADGROUP` from `id`: `>` the entries no consumer has had, `0` this consumer's
    /// own pending ones.
    async fn read(&self, id: &str) -> anyhow::Result<Vec<(String, Delivered)>> {
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg(record::GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(self.batch)
            .arg("STREAMS")
            .arg(&self.key)
            .arg(id);
        let reply: Value = self.redis.call(RedisPurpose::Other, &read).await?;
        read_reply(reply)
    }

    /// `XAUTOCLAIM` from `cursor`: the entries other consumers left unacknowledged past
    /// `claim_idle_ms`, and the cursor to go on from. The ids of entries deleted
    /// meanwhile, Redis 7's third element, are already out of every pending list.
    async fn claim(&self, cursor: &str) -> anyhow::Result<(String, Vec<(String, Delivered)>)> {
        let mut claim = redis::cmd("XAUTOCLAIM");
        claim
            .arg(&self.key)
            .arg(record::GROUP)
            .arg(&self.consumer)
            .arg(self.claim_idle.as_millis() as u64)
            .arg(cursor)
            .arg("COUNT")
            .arg(self.batch);
        let reply: Value = self.redis.call(RedisPurpose::Other, &claim).await?;
        let Value::Array(parts) = reply else {
            anyhow::bail!("XAUTOCLAIM answered {reply:?}");
        };
        let mut parts = parts.into_iter();
        let next = parts.next().as_ref().and_then(text).unwrap_or("0-0".into());
        let entries = entries(parts.next().unwrap_or(Value::Nil))?;
        if let Some(Value::Array(deleted)) = parts.next() {
            if !deleted.is_empty() {
                tracing::debug!(
                    deleted = deleted.len(),
                    "history fold: claimed entries were deleted meanwhile"
                );
            }
        }
        Ok((next, entries))
    }

    /// Folds what a read delivered, then acknowledges and deletes it all.
    async fn fold(&self, delivered: Vec<(String, Delivered)>) -> anyhow::Result<()> {
        if delivered.is_empty() {
            return Ok(());
        }
        if dies_at("history::after_read", self.redis.prefix()) {
            return std::future::pending().await;
        }
        let mut ids = Vec::with_capacity(delivered.len());
        let mut records = Vec::with_capacity(delivered.len());
        for (id, entry) in &delivered {
            match entry {
                Delivered::Record(record) => match minute_rows::check(record) {
                    Ok(()) => records.push(record.as_ref()),
                    Err(why) => self.malformed(id, why),
                },
                Delivered::Malformed(why) => self.malformed(id, why),
                Delivered::Gone => {}
            }
            ids.push(id.as_str());
        }
        let added = self.add(&records).await?;
        self.metrics.history_folded.inc_by(added);
        if dies_at("history::before_ack", self.redis.prefix()) {
            return std::future::pending().await;
        }
        let mut done = redis::pipe();
        done.cmd("XACK")
            .arg(&self.key)
            .arg(record::GROUP)
            .arg(&ids)
            .ignore();
        done.cmd("XDEL").arg(&self.key).arg(&ids).ignore();
        self.redis
            .call::<()>(RedisPurpose::Other, &done)
            .await
            .context("acknowledging folded history records")
    }

    /// Adds `records` in one transaction; when Postgres refuses the batch's data (a
    /// value out of a column's range), one by one, and a record refused alone is
    /// malformed. Any other failure leaves the batch pending, for the next pass.
    async fn add(&self, records: &[&SecondRecord]) -> anyhow::Result<u64> {
        match minute_rows::add(&self.pool, records).await {
            Err(e) if refused_data(&e) => {
                let mut added = 0;
                for record in records {
                    match minute_rows::add(&self.pool, &[*record]).await {
                        Ok(one) => added += one,
                        Err(e) if refused_data(&e) => self.malformed(
                            &format!("{}@{}", record.instance, record.second),
                            &format!("refused by Postgres: {e}"),
                        ),
                        Err(e) => return Err(e).context("folding a history record"),
                    }
                }
                Ok(added)
            }
            answer => answer.context("folding history records into Postgres"),
        }
    }

    fn malformed(&self, entry: &str, why: &str) {
        tracing::warn!(entry, why, "history fold: a malformed record is dropped");
        self.metrics
            .history_dropped
            .with_label_values(&["record"])
            .inc();
    }

    /// Removes the consumers that have nothing pending and have not read for
    /// [`FORGET_CONSUMER_AFTER_MS`] (a live one that is removed is made again by its next
    /// read).
    async fn forget_idle_consumers(&self) -> anyhow::Result<()> {
        let mut info = redis::cmd("XINFO");
        info.arg("CONSUMERS").arg(&self.key).arg(record::GROUP);
        let reply: Value = self.redis.call(RedisPurpose::Other, &info).await?;
        let Value::Array(consumers) = reply else {
            return Ok(());
        };
        let mut forget = redis::pipe();
        let mut forgotten = 0;
        for consumer in consumers {
            let fields = pairs(consumer);
            let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v);
            let (Some(name), Some(Value::Int(0)), Some(Value::Int(idle))) = (
                field("name").and_then(text),
                field("pending"),
                field("idle"),
            ) else {
                continue;
            };
            if *idle >= FORGET_CONSUMER_AFTER_MS && name != self.consumer {
                forget
                    .cmd("XGROUP")
                    .arg("DELCONSUMER")
                    .arg(&self.key)
                    .arg(record::GROUP)
                    .arg(name)
                    .ignore();
                forgotten += 1;
            }
        }
        if forgotten == 0 {
            return Ok(());
        }
        Ok(self.redis.call::<()>(RedisPurpose::Other, &forget).await?)
    }
}

/// Whether Postgres refused the data itself (SQLSTATE class 22, a data exception, or
/// 23, an integrity violation): sending it again would fail again.
fn refused_data(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code.starts_with("22") || code.starts_with("23"))
}

fn e_code(error: &RedisCallError) -> Option<&str> {
    match error {
        RedisCallError::Failed { source, .. } => source.code(),
        RedisCallError::Timeout { .. } => None,
    }
}

fn redis_code_is(error: &anyhow::Error, code: &str) -> bool {
    error
        .chain()
        .filter_map(|e| e.downcast_ref::<RedisCallError>())
        .any(|e| e_code(e) == Some(code))
}

/// The entries of an `XREADGROUP` reply, `[[key, [entry, …]]]`, or nil for none.
fn read_reply(reply: Value) -> anyhow::Result<Vec<(String, Delivered)>> {
    let streams = match reply {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(streams) => streams,
        Value::Map(streams) => streams.into_iter().map(|(_, v)| v).collect(),
        other => anyhow::bail!("XREADGROUP answered {other:?}"),
    };
    let mut delivered = Vec::new();
    for stream in streams {
        let list = match stream {
            Value::Array(mut pair) if pair.len() == 2 => pair.pop().unwrap_or(Value::Nil),
            other => other,
        };
        delivered.extend(entries(list)?);
    }
    Ok(delivered)
}

/// A list of entries, each `[id, [field, value, …]]`, or `[id, nil]` once deleted.
fn entries(list: Value) -> anyhow::Result<Vec<(String, Delivered)>> {
    let list = match list {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(list) => list,
        other => anyhow::bail!("a stream read answered {other:?}"),
    };
    list.into_iter()
        .map(|entry| {
            let Value::Array(parts) = entry else {
                anyhow::bail!("a stream entry is {entry:?}");
            };
            let mut parts = parts.into_iter();
            let id = parts
                .next()
                .as_ref()
                .and_then(text)
                .context("a stream entry without an id")?;
            let delivered = match parts.next() {
                None | Some(Value::Nil) => Delivered::Gone,
                Some(fields) => body(fields),
            };
            Ok((id, delivered))
        })
        .collect()
}

/// An entry's record, from its one field `r`.
fn body(fields: Value) -> Delivered {
    let Some((_, value)) = pairs(fields)
        .into_iter()
        .find(|(name, _)| name == record::FIELD)
    else {
        return Delivered::Malformed(format!("no `{}` field", record::FIELD));
    };
    let Value::BulkString(bytes) = value else {
        return Delivered::Malformed(format!("`{}` is {value:?}", record::FIELD));
    };
    match serde_json::from_slice::<SecondRecord>(&bytes) {
        Ok(record) => Delivered::Record(Box::new(record)),
        Err(e) => Delivered::Malformed(format!("not a record: {e}")),
    }
}

/// A flat `[name, value, …]` array (or a RESP3 map) as its pairs, names as text.
fn pairs(value: Value) -> Vec<(String, Value)> {
    let list: Vec<(Value, Value)> = match value {
        Value::Map(map) => map,
        Value::Array(flat) => {
            let mut flat = flat.into_iter();
            std::iter::from_fn(|| Some((flat.next()?, flat.next()?))).collect()
        }
        _ => Vec::new(),
    };
    list.into_iter()
        .filter_map(|(name, value)| Some((text(&name)?, value)))
        .collect()
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// A fault-injection point of the tests: with the `failpoints` feature, `point`
/// configured as `return(<key prefix>)` makes the fold of that deployment stop for good
/// there, as if its process had died, leaving what it read pending on its consumer
/// (`history::after_read`: before Postgres; `history::before_ack`: after the commit).
/// Keyed by the prefix, since tests share the process. Without the feature, `false`.
#[cfg(feature = "failpoints")]
fn dies_at(point: &str, prefix: &str) -> bool {
    fail::eval(point, |target| target.as_deref() == Some(prefix)).unwrap_or(false)
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
fn dies_at(_point: &str, _prefix: &str) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_read_reply_gives_records_malformed_entries_and_deleted_ones() {
        let good = serde_json::json!({"instance": "a", "second": 60}).to_string();
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("k"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk("1-0"),
                    Value::Array(vec![bulk("r"), bulk(&good)]),
                ]),
                Value::Array(vec![bulk("2-0"), Value::Array(vec![bulk("r"), bulk("{")])]),
                Value::Array(vec![bulk("3-0"), Value::Array(vec![bulk("x"), bulk("1")])]),
                Value::Array(vec![bulk("4-0"), Value::Nil]),
            ]),
        ])]);
        let delivered = read_reply(reply).expect("a reply");
        let ids: Vec<&str> = delivered.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["1-0", "2-0", "3-0", "4-0"]);
        assert!(
            matches!(&delivered[0].1, Delivered::Record(r) if r.instance == "a" && r.second == 60)
        );
        assert!(matches!(&delivered[1].1, Delivered::Malformed(_)));
        assert!(matches!(&delivered[2].1, Delivered::Malformed(_)));
        assert!(matches!(&delivered[3].1, Delivered::Gone));
        assert!(read_reply(Value::Nil).expect("none").is_empty());
    }
}
