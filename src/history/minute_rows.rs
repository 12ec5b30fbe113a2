//! A batch of records as the per-minute rows they add, written in one transaction that
//! adds only the records Postgres has not seen.
//!
//! The key is the record's `(instance, second)` (`history_records`), not its stream id: a
//! record redelivered after its consumer died, a record appended twice by a writer
//! that retried, and records folded out of order are all recognised by what they are,
//! where a high-water mark on ids would skip the late ones or count the repeated ones.
//! The transaction inserts the batch's keys first (`ON CONFLICT DO NOTHING RETURNING`):
//! the keys it returns are the records new to Postgres, and only theirs are summed and
//! added. Two instances folding the same record meet on its key's row: the second waits
//! for the first's commit and then finds it. Rows are written sorted by key, table after
//! table, so two folds lock them in one order.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{PgPool, Postgres, Transaction};

use crate::domain::{is_printable, is_storable};
use crate::stats::record::{Hitter, SecondRecord};

/// Why a record cannot be stored, or `Ok`: every text printable (Postgres refuses a
/// NUL), every instant within 1970-9999.
pub(super) fn check(record: &SecondRecord) -> Result<(), &'static str> {
    fn texts_ok<'a>(mut texts: impl Iterator<Item = &'a str>) -> bool {
        texts.all(is_printable)
    }
    let instant_ok = |at: Option<DateTime<Utc>>| at.is_some_and(is_storable);
    if record.instance.is_empty() || !is_printable(&record.instance) {
        return Err("no instance, or an unprintable one");
    }
    if !instant_ok(minute_of(record.second)) {
        return Err("a second out of range");
    }
    let decisions = record
        .decisions
        .iter()
        .flat_map(|d| [d.policy.as_str(), d.rule.as_str(), d.outcome.as_str()]);
    let outcomes = record
        .items
        .iter()
        .flat_map(|i| i.outcomes.keys().map(String::as_str));
    if !texts_ok(decisions.chain(outcomes)) {
        return Err("an unprintable policy, rule or outcome");
    }
    for sample in &record.samples {
        let texts = [sample.policy.as_str(), sample.rule.as_str()];
        if !instant_ok(DateTime::from_timestamp_millis(sample.at_ms))
            || !texts_ok(texts.into_iter().chain(sample.ip.as_deref()))
        {
            return Err("a refusal sample out of range or unprintable");
        }
    }
    if let Some(sketch) = &record.minute {
        if !instant_ok(minute_of(sketch.minute)) {
            return Err("a sketch's minute out of range");
        }
        let texts = kinds(sketch).flat_map(|(_, hitters)| {
            hitters.iter().flat_map(|h| {
                std::iter::once(h.value.as_str()).chain(h.dimensions.keys().map(String::as_str))
            })
        });
        if !texts_ok(texts) {
            return Err("an unprintable heavy hitter");
        }
    }
    Ok(())
}

/// Adds the records Postgres has not folded yet, in one transaction; answers how many
/// were new. A record twice in `records` counts once.
pub(super) async fn add(pool: &PgPool, records: &[&SecondRecord]) -> Result<u64, sqlx::Error> {
    let mut by_key = BTreeMap::new();
    for record in records {
        by_key
            .entry((record.instance.clone(), record.second))
            .or_insert(*record);
    }
    if by_key.is_empty() {
        return Ok(0);
    }
    let (instances, seconds): (Vec<String>, Vec<i64>) = by_key.keys().cloned().unzip();
    let mut tx = pool.begin().await?;
    let new = sqlx::query!(
        r#"INSERT INTO history_records (instance, second)
           SELECT * FROM UNNEST($1::text[], $2::bigint[])
           ON CONFLICT DO NOTHING
           RETURNING instance, second"#,
        &instances,
        &seconds,
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut rows = Rows::default();
    for key in &new {
        if let Some(record) = by_key.get(&(key.instance.clone(), key.second)) {
            rows.add(record);
        }
    }
    rows.write(&mut tx).await?;
    tx.commit().await?;
    Ok(new.len() as u64)
}

/// The minute a unix second falls in.
fn minute_of(second: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(second - second.rem_euclid(60), 0)
}

/// A sketch's lists by their `history_hitters.kind`.
fn kinds(
    sketch: &crate::stats::record::MinuteSketch,
) -> impl Iterator<Item = (&'static str, &Vec<Hitter>)> {
    [
        ("user", &sketch.users),
        ("ip", &sketch.addresses),
        ("join_ip", &sketch.join_addresses),
        ("join_block", &sketch.join_blocks),
    ]
    .into_iter()
}

/// A room's minute.
#[derive(Default)]
struct Room {
    joins: i64,
    admissions: i64,
    abandons: i64,
    waits: Vec<i64>,
}

/// A heavy hitter's minute on one instance.
#[derive(Default)]
struct HitterSum {
    count: i64,
    error: i64,
    dimensions: BTreeMap<String, i64>,
    others: i64,
}

/// What new records add, summed per row (so no statement names a row twice), in key
/// order.
#[derive(Default)]
struct Rows {
    items: BTreeMap<(i64, DateTime<Utc>, String), i64>,
    decisions: BTreeMap<(String, DateTime<Utc>, String, String), i64>,
    rooms: BTreeMap<(i64, i64), Room>,
    /// Keyed as `history_hitters`: minute, instance, kind, value, item.
    hitters: BTreeMap<(i64, String, &'static str, String, i64), HitterSum>,
    samples: Samples,
}

/// `refusal_samples`' columns.
#[derive(Default)]
struct Samples {
    at: Vec<DateTime<Utc>>,
    instance: Vec<String>,
    policy: Vec<String>,
    rule: Vec<String>,
    user: Vec<Option<i64>>,
    ip: Vec<Option<String>>,
    item: Vec<Option<i64>>,
}

impl Rows {
    /// Adds one record (checked by [`check`]).
    fn add(&mut self, record: &SecondRecord) {
        let Some(minute) = minute_of(record.second) else {
            return;
        };
        for d in &record.decisions {
            let key = (d.policy.clone(), minute, d.rule.clone(), d.outcome.clone());
            let count = self.decisions.entry(key).or_default();
            *count = count.saturating_add(d.count);
        }
        for item in &record.items {
            for (outcome, n) in &item.outcomes {
                let count = self
                    .items
                    .entry((item.item, minute, outcome.clone()))
                    .or_default();
                *count = count.saturating_add(*n);
            }
            let r = &item.room;
            if r.joins != 0 || r.admissions != 0 || r.abandons != 0 || !r.waits.is_empty() {
                let room = self
                    .rooms
                    .entry((item.item, minute.timestamp()))
                    .or_default();
                room.joins = room.joins.saturating_add(r.joins);
                room.admissions = room.admissions.saturating_add(r.admissions);
                room.abandons = room.abandons.saturating_add(r.abandons);
                if room.waits.len() < r.waits.len() {
                    room.waits.resize(r.waits.len(), 0);
                }
                for (sum, n) in room.waits.iter_mut().zip(&r.waits) {
                    *sum = sum.saturating_add(*n);
                }
            }
        }
        for s in &record.samples {
            let Some(at) = DateTime::from_timestamp_millis(s.at_ms) else {
                continue;
            };
            let samples = &mut self.samples;
            samples.at.push(at);
            samples.instance.push(record.instance.clone());
            samples.policy.push(s.policy.clone());
            samples.rule.push(s.rule.clone());
            samples.user.push(s.user);
            samples.ip.push(s.ip.clone());
            samples.item.push(s.item);
        }
        if let Some(sketch) = &record.minute {
            let Some(minute) = minute_of(sketch.minute) else {
                return;
            };
            for (kind, hitters) in kinds(sketch) {
                for h in hitters {
                    let key = (
                        minute.timestamp(),
                        record.instance.clone(),
                        kind,
                        h.value.clone(),
                        h.item,
                    );
                    let sum = self.hitters.entry(key).or_default();
                    sum.count = sum.count.saturating_add(h.count);
                    sum.error = sum.error.saturating_add(h.error);
                    sum.others = sum.others.max(h.others);
                    for (dimension, n) in &h.dimensions {
                        let d = sum.dimensions.entry(dimension.clone()).or_default();
                        *d = d.saturating_add(*n);
                    }
                }
            }
        }
    }

    /// Upserts every row, adding to what the minute holds: `history_items`,
    /// `history_decisions`, `history_rooms` (`waits` element by element),
    /// `history_hitters` (counts added, the distinct others the larger), then the
    /// samples.
    async fn write(&self, tx: &mut Transaction<'_, Postgres>) -> Result<(), sqlx::Error> {
        if !self.items.is_empty() {
            let mut columns = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for ((item, minute, outcome), count) in &self.items {
                columns.0.push(*item);
                columns.1.push(*minute);
                columns.2.push(outcome.clone());
                columns.3.push(*count);
            }
            sqlx::query!(
                r#"INSERT INTO history_items (item_id, minute, outcome, count)
                   SELECT * FROM UNNEST($1::bigint[], $2::timestamptz[], $3::text[], $4::bigint[])
                   ON CONFLICT (item_id, minute, outcome)
                   DO UPDATE SET count = history_items.count + EXCLUDED.count"#,
                &columns.0,
                &columns.1,
                &columns.2,
                &columns.3,
            )
            .execute(&mut **tx)
            .await?;
        }
        if !self.decisions.is_empty() {
            let mut columns = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for ((policy, minute, rule, outcome), count) in &self.decisions {
                columns.0.push(policy.clone());
                columns.1.push(*minute);
                columns.2.push(rule.clone());
                columns.3.push(outcome.clone());
                columns.4.push(*count);
            }
            sqlx::query!(
                r#"INSERT INTO history_decisions (policy, minute, rule, outcome, count)
                   SELECT * FROM UNNEST($1::text[], $2::timestamptz[], $3::text[], $4::text[],
                                        $5::bigint[])
                   ON CONFLICT (policy, minute, rule, outcome)
                   DO UPDATE SET count = history_decisions.count + EXCLUDED.count"#,
                &columns.0,
                &columns.1,
                &columns.2,
                &columns.3,
                &columns.4,
            )
            .execute(&mut **tx)
            .await?;
        }
        if !self.rooms.is_empty() {
            // As JSON: each row carries an array, which UNNEST would flatten.
            let rooms: Vec<_> = self
                .rooms
                .iter()
                .map(|((item, minute), r)| {
                    json!({
                        "item_id": item, "minute": minute, "joins": r.joins,
                        "admissions": r.admissions, "abandons": r.abandons, "waits": r.waits,
                    })
                })
                .collect();
            sqlx::query!(
                r#"INSERT INTO history_rooms (item_id, minute, joins, admissions, abandons, waits)
                   SELECT item_id, to_timestamp(minute), joins, admissions, abandons, waits
                   FROM jsonb_to_recordset($1::jsonb) AS r(item_id BIGINT, minute BIGINT,
                        joins BIGINT, admissions BIGINT, abandons BIGINT, waits BIGINT[])
                   ON CONFLICT (item_id, minute) DO UPDATE SET
                     joins = history_rooms.joins + EXCLUDED.joins,
                     admissions = history_rooms.admissions + EXCLUDED.admissions,
                     abandons = history_rooms.abandons + EXCLUDED.abandons,
                     waits = ARRAY(
                       SELECT COALESCE(old, 0) + COALESCE(new, 0)
                       FROM unnest(history_rooms.waits, EXCLUDED.waits)
                            WITH ORDINALITY AS w(old, new, position)
                       ORDER BY position)"#,
                serde_json::Value::Array(rooms),
            )
            .execute(&mut **tx)
            .await?;
        }
        if !self.hitters.is_empty() {
            let hitters: Vec<_> = self
                .hitters
                .iter()
                .map(|((minute, instance, kind, value, item), h)| {
                    json!({
                        "minute": minute, "instance": instance, "kind": kind, "value": value,
                        "item_id": item, "count": h.count, "error": h.error,
                        "dimensions": h.dimensions, "others": h.others,
                    })
                })
                .collect();
            sqlx::query!(
                r#"INSERT INTO history_hitters
                     (minute, instance, kind, value, item_id, count, error, dimensions, others)
                   SELECT to_timestamp(minute), instance, kind, value, item_id, count, error,
                          dimensions, others
                   FROM jsonb_to_recordset($1::jsonb) AS h(minute BIGINT, instance TEXT,
                        kind TEXT, value TEXT, item_id BIGINT, count BIGINT, error BIGINT,
                        dimensions JSONB, others BIGINT)
                   ON CONFLICT (minute, instance, kind, value, item_id) DO UPDATE SET
                     count = history_hitters.count + EXCLUDED.count,
                     error = history_hitters.error + EXCLUDED.error,
                     others = GREATEST(history_hitters.others, EXCLUDED.others),
                     dimensions = (
                       SELECT COALESCE(jsonb_object_agg(d,
                                COALESCE((history_hitters.dimensions ->> d)::bigint, 0)
                                + COALESCE((EXCLUDED.dimensions ->> d)::bigint, 0)), '{}')
                       FROM jsonb_object_keys(history_hitters.dimensions || EXCLUDED.dimensions)
                            AS d)"#,
                serde_json::Value::Array(hitters),
            )
            .execute(&mut **tx)
            .await?;
        }
        let s = &self.samples;
        if !s.at.is_empty() {
            sqlx::query!(
                r#"INSERT INTO refusal_samples (at, instance, policy, rule, user_id, ip, item_id)
                   SELECT * FROM UNNEST($1::timestamptz[], $2::text[], $3::text[], $4::text[],
                                        $5::bigint[], $6::text[], $7::bigint[])"#,
                &s.at,
                &s.instance,
                &s.policy,
                &s.rule,
                &s.user as &[Option<i64>],
                &s.ip as &[Option<String>],
                &s.item as &[Option<i64>],
            )
            .execute(&mut **tx)
            .await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::record::{ItemCounts, RefusalSample, RoomCounts};

    fn record(second: i64, waits: Vec<i64>) -> SecondRecord {
        SecondRecord {
            instance: "a".into(),
            second,
            items: vec![ItemCounts {
                item: 7,
                outcomes: [("created".to_string(), 2)].into(),
                room: RoomCounts {
                    joins: 1,
                    waits,
                    ..RoomCounts::default()
                },
            }],
            ..SecondRecord::default()
        }
    }

    #[test]
    fn a_record_postgres_could_not_store_is_refused_before_it() {
        assert_eq!(check(&record(1_796_400_000, vec![])), Ok(()));
        let mut nul = record(1_796_400_000, vec![]);
        nul.instance = "a\0".into();
        assert!(check(&nul).is_err());
        assert!(check(&record(-1, vec![])).is_err());
        assert!(check(&record(i64::MAX, vec![])).is_err());
        let mut sample = record(1_796_400_000, vec![]);
        sample.samples.push(RefusalSample {
            at_ms: i64::MAX,
            policy: "p".into(),
            rule: "r".into(),
            user: None,
            ip: None,
            item: None,
        });
        assert!(check(&sample).is_err());
    }

    #[test]
    fn records_of_one_minute_add_up_in_one_row_and_waits_element_by_element() {
        let mut rows = Rows::default();
        rows.add(&record(1_796_400_000, vec![1, 2]));
        rows.add(&record(1_796_400_059, vec![10, 20, 30]));
        rows.add(&record(1_796_400_060, vec![]));
        let created: Vec<i64> = rows.items.values().copied().collect();
        assert_eq!(created, [4, 2], "two minutes");
        let room = &rows.rooms[&(7, 1_796_400_000)];
        assert_eq!((room.joins, room.waits.as_slice()), (2, &[11, 22, 30][..]));
        assert_eq!(rows.rooms[&(7, 1_796_400_060)].joins, 1);
    }
}
