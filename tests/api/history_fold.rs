//! The fold of the decision stream into Postgres (`seckill::history::fold`): records this
//! file appends itself (the stats flush writes the real ones), folded once each whatever
//! happens to their delivery: a consumer killed before its acknowledgement, a record
//! delivered again, records out of order; and the retention of what was folded.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use seckill::configuration::Settings;
use seckill::history::Retention;
use seckill::metrics::Metrics;
use seckill::stats::record::{
    self, DecisionCount, Hitter, ItemCounts, MinuteSketch, RefusalSample, RoomCounts, SecondRecord,
};
use seckill::store::RedisStore;
use seckill_test_support::{
    eventually, redis_connection, spawn_app_from, spawn_app_with, test_settings,
};
use sqlx::PgPool;

/// The items and the policy the records below count for: none the apps' own traffic
/// uses, so the rows compared are only these records'.
const ITEMS: [i64; 2] = [990_001, 990_002];
const POLICY: &str = "history_test";

/// A fold every 50 ms, in batches of `batch`, claiming after `claim_idle_ms`.
fn quick_fold(s: &mut Settings, batch: usize, claim_idle_ms: u64) {
    s.history.fold_every_ms = 50;
    s.history.fold_batch = batch;
    s.history.claim_idle_ms = claim_idle_ms;
}

/// The start of the minute an hour ago: the records' seconds are this and after.
fn an_hour_ago() -> i64 {
    let now = chrono::Utc::now().timestamp();
    now - now.rem_euclid(60) - 3_600
}

/// A record of `instance` at `second` whose every count depends on `n`: decisions,
/// both items' outcomes and rooms, a sample, and on a minute's first second a sketch.
fn record(instance: &str, second: i64, n: i64) -> SecondRecord {
    let item = |item: i64| ItemCounts {
        item,
        outcomes: [
            ("created".to_string(), n),
            ("rejected:user".to_string(), 2 * n + item % 2),
        ]
        .into(),
        room: RoomCounts {
            joins: 3 * n,
            admissions: n,
            abandons: 1,
            // A later version's record may carry more buckets: added element-wise.
            waits: (0..(n % 3 + 12) as usize).map(|i| i as i64 + n).collect(),
        },
    };
    let decision = |rule: &str, outcome: &str, count: i64| DecisionCount {
        policy: POLICY.into(),
        rule: rule.into(),
        outcome: outcome.into(),
        count,
    };
    let hitter = |value: String, count: i64| Hitter {
        value,
        item: ITEMS[0],
        count,
        error: 1,
        dimensions: [("user".to_string(), count)].into(),
        others: n,
    };
    SecondRecord {
        instance: instance.into(),
        second,
        decisions: vec![decision("user", "pass", n), decision("ip", "reject", 1)],
        items: vec![item(ITEMS[0]), item(ITEMS[1])],
        samples: vec![RefusalSample {
            at_ms: second * 1_000 + 250,
            policy: POLICY.into(),
            rule: "user".into(),
            user: Some(n),
            ip: (n % 2 == 0).then(|| format!("10.9.0.{n}")),
            item: Some(ITEMS[0]),
        }],
        samples_dropped: 0,
        minute: (second % 60 == 0).then(|| MinuteSketch {
            minute: second - 60,
            users: vec![hitter(n.to_string(), 5 * n)],
            addresses: vec![hitter("10.9.0.1".into(), n)],
            join_addresses: vec![hitter("10.9.0.2".into(), 2)],
            join_blocks: vec![hitter("0-63".into(), 3)],
        }),
    }
}

/// `count` records of each instance, seconds 20 apart from `start`, so they span
/// minutes and carry sketches.
fn records(instances: &[&str], start: i64, count: i64) -> Vec<SecondRecord> {
    instances
        .iter()
        .flat_map(|instance| (0..count).map(move |i| record(instance, start + 20 * i, i + 1)))
        .collect()
}

/// A room's minute: joins, admissions, abandons, waits.
type RoomRow = (i64, i64, i64, Vec<i64>);
/// A hitter's key (minute, instance, kind, value) and its count, error, others and
/// dimensions.
type HitterKey = (i64, String, String, String);
type HitterSums = (i64, i64, i64, serde_json::Value);

/// The history tables, as the rows of this file's items, policy and instances.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tables {
    items: BTreeMap<(i64, i64, String), i64>,
    decisions: BTreeMap<(i64, String, String), i64>,
    rooms: BTreeMap<(i64, i64), RoomRow>,
    hitters: BTreeMap<HitterKey, HitterSums>,
    samples: BTreeMap<(i64, String, Option<i64>, Option<String>), i64>,
    records: BTreeSet<(String, i64)>,
}

/// What the tables must hold once `records` are folded, each once: their sums.
fn sums(records: &[SecondRecord]) -> Tables {
    let mut t = Tables::default();
    for r in records {
        let minute = r.second - r.second.rem_euclid(60);
        assert!(t.records.insert((r.instance.clone(), r.second)), "distinct");
        for d in &r.decisions {
            *t.decisions
                .entry((minute, d.rule.clone(), d.outcome.clone()))
                .or_default() += d.count;
        }
        for item in &r.items {
            for (outcome, n) in &item.outcomes {
                *t.items
                    .entry((item.item, minute, outcome.clone()))
                    .or_default() += n;
            }
            let room = t.rooms.entry((item.item, minute)).or_default();
            room.0 += item.room.joins;
            room.1 += item.room.admissions;
            room.2 += item.room.abandons;
            room.3.resize(room.3.len().max(item.room.waits.len()), 0);
            for (sum, n) in room.3.iter_mut().zip(&item.room.waits) {
                *sum += n;
            }
        }
        for s in &r.samples {
            *t.samples
                .entry((s.at_ms, r.instance.clone(), s.user, s.ip.clone()))
                .or_default() += 1;
        }
        if let Some(sketch) = &r.minute {
            let kinds = [
                ("user", &sketch.users),
                ("ip", &sketch.addresses),
                ("join_ip", &sketch.join_addresses),
                ("join_block", &sketch.join_blocks),
            ];
            for (kind, hitters) in kinds {
                for h in hitters {
                    let key = (
                        sketch.minute,
                        r.instance.clone(),
                        kind.into(),
                        h.value.clone(),
                    );
                    let row = (h.count, h.error, h.others, serde_json::json!(h.dimensions));
                    assert!(t.hitters.insert(key, row).is_none());
                }
            }
        }
    }
    t
}

/// The tables' rows of `instances`, this file's items and its policy.
async fn tables(db: &PgPool, instances: &[&str]) -> Tables {
    let items_of = ITEMS.to_vec();
    let instances: Vec<String> = instances.iter().map(|i| i.to_string()).collect();
    let items: Vec<(i64, i64, String, i64)> = sqlx::query_as(
        "SELECT item_id, extract(epoch FROM minute)::bigint, outcome, count FROM history_items
         WHERE item_id = ANY($1)",
    )
    .bind(&items_of)
    .fetch_all(db)
    .await
    .expect("history_items");
    let decisions: Vec<(i64, String, String, i64)> = sqlx::query_as(
        "SELECT extract(epoch FROM minute)::bigint, rule, outcome, count FROM history_decisions
         WHERE policy = $1",
    )
    .bind(POLICY)
    .fetch_all(db)
    .await
    .expect("history_decisions");
    let rooms: Vec<(i64, i64, i64, i64, i64, Vec<i64>)> = sqlx::query_as(
        "SELECT item_id, extract(epoch FROM minute)::bigint, joins, admissions, abandons, waits
         FROM history_rooms WHERE item_id = ANY($1)",
    )
    .bind(&items_of)
    .fetch_all(db)
    .await
    .expect("history_rooms");
    type HitterRow = (
        i64,
        String,
        String,
        String,
        i64,
        i64,
        i64,
        serde_json::Value,
    );
    let hitters: Vec<HitterRow> = sqlx::query_as(
        "SELECT extract(epoch FROM minute)::bigint, instance, kind, value, count, error, others,
                dimensions
         FROM history_hitters WHERE instance = ANY($1) AND item_id = $2",
    )
    .bind(&instances)
    .bind(ITEMS[0])
    .fetch_all(db)
    .await
    .expect("history_hitters");
    let samples: Vec<(i64, String, Option<i64>, Option<String>)> = sqlx::query_as(
        "SELECT (extract(epoch FROM at) * 1000)::bigint, instance, user_id, ip
         FROM refusal_samples WHERE instance = ANY($1) AND policy = $2 AND item_id = $3",
    )
    .bind(&instances)
    .bind(POLICY)
    .bind(ITEMS[0])
    .fetch_all(db)
    .await
    .expect("refusal_samples");
    let records: Vec<(String, i64)> =
        sqlx::query_as("SELECT instance, second FROM history_records WHERE instance = ANY($1)")
            .bind(&instances)
            .fetch_all(db)
            .await
            .expect("history_records");
    let mut t = Tables {
        records: records.into_iter().collect(),
        ..Tables::default()
    };
    for (item, minute, outcome, count) in items {
        t.items.insert((item, minute, outcome), count);
    }
    for (minute, rule, outcome, count) in decisions {
        t.decisions.insert((minute, rule, outcome), count);
    }
    for (item, minute, joins, admissions, abandons, waits) in rooms {
        t.rooms
            .insert((item, minute), (joins, admissions, abandons, waits));
    }
    for (minute, instance, kind, value, count, error, others, dimensions) in hitters {
        t.hitters.insert(
            (minute, instance, kind, value),
            (count, error, others, dimensions),
        );
    }
    for sample in samples {
        *t.samples.entry(sample).or_default() += 1;
    }
    t
}

/// Appends each record as the stats flush does (`XADD <stream> * r <json>`); answers
/// the entries' ids.
async fn append(settings: &Settings, records: &[SecondRecord]) -> Vec<String> {
    let mut ids = Vec::new();
    for r in records {
        let json = serde_json::to_string(r).expect("a record");
        ids.push(append_raw(settings, record::FIELD, &json).await);
    }
    ids
}

/// One entry of the test's own making, right or wrong.
async fn append_raw(settings: &Settings, field: &str, value: &str) -> String {
    let mut redis = redis_connection(settings).await;
    redis::cmd("XADD")
        .arg(stream(settings))
        .arg("*")
        .arg(field)
        .arg(value)
        .query_async(&mut redis)
        .await
        .expect("XADD")
}

fn stream(settings: &Settings) -> String {
    record::stream_key(&settings.redis_key_prefix)
}

/// Which of `ids` the stream still holds, and which are pending on some consumer.
async fn left_in_stream(settings: &Settings, ids: &[String]) -> (Vec<String>, Vec<String>) {
    let mut redis = redis_connection(settings).await;
    let held: Vec<(String, redis::Value)> = redis::cmd("XRANGE")
        .arg(stream(settings))
        .arg("-")
        .arg("+")
        .query_async(&mut redis)
        .await
        .expect("XRANGE");
    let pending: Vec<(String, String, i64, i64)> = redis::cmd("XPENDING")
        .arg(stream(settings))
        .arg(record::GROUP)
        .arg("-")
        .arg("+")
        .arg(10_000)
        .query_async(&mut redis)
        .await
        .unwrap_or_default();
    let mine = |id: &String| ids.contains(id);
    (
        held.into_iter().map(|(id, _)| id).filter(mine).collect(),
        pending
            .into_iter()
            .map(|(id, ..)| id)
            .filter(mine)
            .collect(),
    )
}

/// Waits until the tables hold exactly `want` and none of `ids` is left in the stream;
/// past the deadline, fails showing what they hold.
async fn until_folded(
    settings: &Settings,
    db: &PgPool,
    instances: &[&str],
    ids: &[String],
    want: &Tables,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        let now = tables(db, instances).await;
        let left = left_in_stream(settings, ids).await;
        if (now == *want && left == (vec![], vec![])) || std::time::Instant::now() > deadline {
            assert_eq!(now, *want, "the tables hold each record once");
            assert_eq!(left, (vec![], vec![]), "entries left: held, pending");
            return;
        }
    }
}

#[sqlx::test]
async fn records_of_one_instance_folded_out_of_order_add_up_to_the_same_rows(db: PgPool) {
    let app = spawn_app_with(&db, |s| quick_fold(s, 4, 60_000)).await;
    let settings = &app.settings;
    let all = records(&["w1"], an_hour_ago(), 12);
    // The later seconds first, folded; then the earlier ones, interleaved backwards:
    // a high-water mark on the records (or their ids) would skip every one of these.
    let (early, late) = all.split_at(6);
    let ids = append(settings, late).await;
    until_folded(settings, &db, &["w1"], &ids, &sums(late)).await;
    let backwards: Vec<SecondRecord> = [1, 5, 0, 3, 4, 2].map(|i| early[i].clone()).into();
    let ids = append(settings, &backwards).await;
    until_folded(settings, &db, &["w1"], &ids, &sums(&all)).await;
}

#[sqlx::test]
async fn records_a_killed_instance_read_are_claimed_and_folded_once_over_two_instances(db: PgPool) {
    let mut settings = test_settings(&db);
    quick_fold(&mut settings, 3, 60_000);
    let prefix = settings.redis_key_prefix.clone();
    let writers = ["w1", "w2"];
    let all = records(&writers, an_hour_ago(), 6);
    // Appended before any fold starts: the group, made from the first entry, folds
    // them (made from `$`, it would skip them).
    let ids = append(&settings, &all).await;

    // Instance A1 reads the first batch (3 entries) and dies before Postgres.
    fail::cfg("history::after_read", &format!("return({prefix})")).unwrap();
    let a1 = spawn_app_from(settings.clone()).await;
    eventually(
        "A1 holds the first batch",
        Duration::from_secs(10),
        || async {
            let (_, pending) = left_in_stream(&settings, &ids).await;
            (pending == ids[..3]).then_some(())
        },
    )
    .await;
    fail::remove("history::after_read");

    // Instance A2 reads the next batch, commits it, and dies before its XACK.
    fail::cfg("history::before_ack", &format!("return({prefix})")).unwrap();
    let a2 = spawn_app_from(settings.clone()).await;
    let a2_folded = sums(&all[3..6]).records;
    eventually(
        "A2 folds its batch and dies",
        Duration::from_secs(10),
        || async {
            let (_, pending) = left_in_stream(&settings, &ids).await;
            let folded = tables(&db, &writers).await.records;
            (pending == ids[..6] && folded == a2_folded).then_some(())
        },
    )
    .await;
    fail::remove("history::before_ack");
    drop((a1, a2));

    // Instance B reads the rest and claims both dead consumers' entries: every record
    // once, A2's not twice.
    quick_fold(&mut settings, 3, 100);
    let b = spawn_app_from(settings.clone()).await;
    until_folded(&settings, &db, &writers, &ids, &sums(&all)).await;
    // B added the 9 records A2 had not committed (and whatever the apps' own stats
    // flushes appended meanwhile).
    assert!(b.metric_sum("seckill_history_folded_total").await >= 9.0);
}

#[sqlx::test]
async fn records_read_while_postgres_is_away_are_folded_once_it_is_back(db: PgPool) {
    let app = spawn_app_with(&db, |s| quick_fold(s, 4, 60_000)).await;
    let settings = &app.settings;
    let all = records(&["w1"], an_hour_ago(), 6);
    app.take_postgres_away().await;
    let ids = append(settings, &all).await;
    // A batch is read (the first, or what was appended of it when the pass came), fails,
    // and stays pending on the app's own consumer.
    eventually(
        "a batch read and not folded",
        Duration::from_secs(10),
        || async {
            let (_, pending) = left_in_stream(settings, &ids).await;
            (!pending.is_empty() && ids.starts_with(&pending)).then_some(())
        },
    )
    .await;
    app.bring_postgres_back().await;
    until_folded(settings, &db, &["w1"], &ids, &sums(&all)).await;
}

#[sqlx::test]
async fn retention_deletes_what_is_old_and_keeps_what_is_not(db: PgPool) {
    // No app: no fold to take the stream's entry away from under the round.
    sqlx::migrate!().run(&db).await.expect("migrated");
    let mut settings = test_settings(&db);
    settings.history.retention_days = 90;
    settings.history.sample_retention_days = 7;
    let days_ago = |days: i64| chrono::Utc::now() - chrono::Duration::days(days);
    // A full batch and one more of old rows, so a round deletes past one statement.
    sqlx::query(
        "INSERT INTO history_items (item_id, minute, outcome, count)
         SELECT i, $1, 'created', 1 FROM generate_series(1, $2) AS i",
    )
    .bind(days_ago(91))
    .bind(seckill::history::retention::BATCH + 1)
    .execute(&db)
    .await
    .unwrap();
    for (days, item) in [(91, 1_i64), (89, 2)] {
        let minute = days_ago(days);
        for sql in [
            "INSERT INTO history_items (item_id, minute, outcome, count) VALUES ($2, $1, 'x', 1)",
            "INSERT INTO history_decisions (policy, minute, rule, outcome, count)
             VALUES ('p', $1, $2::text, 'pass', 1)",
            "INSERT INTO history_rooms (item_id, minute) VALUES ($2, $1)",
            "INSERT INTO history_hitters (minute, instance, kind, value, count)
             VALUES ($1, 'i', 'user', $2::text, 1)",
        ] {
            sqlx::query(sql)
                .bind(minute)
                .bind(item)
                .execute(&db)
                .await
                .unwrap();
        }
    }
    for days in [8, 6] {
        sqlx::query(
            "INSERT INTO refusal_samples (at, instance, policy, rule) VALUES ($1, 'i', 'p', 'r')",
        )
        .bind(days_ago(days))
        .execute(&db)
        .await
        .unwrap();
    }
    for (second, days) in [(1, 101), (2, 99), (3, 92), (4, 1)] {
        sqlx::query(
            "INSERT INTO history_records (instance, second, folded_at) VALUES ('i', $1, $2)",
        )
        .bind(second)
        .bind(days_ago(days))
        .execute(&db)
        .await
        .unwrap();
    }
    // An entry appended 100 days ago is still in the stream (its consumer died): a record
    // folded after it may be delivered again, so its key stays.
    let mut redis = redis_connection(&settings).await;
    let appended = days_ago(100).timestamp_millis();
    let _: String = redis::cmd("XADD")
        .arg(stream(&settings))
        .arg(format!("{appended}-0"))
        .arg(record::FIELD)
        .arg("{}")
        .query_async(&mut redis)
        .await
        .unwrap();
    let store = RedisStore::connect(
        &seckill::startup::redis_options(&settings),
        Arc::new(Metrics::new().unwrap()),
    )
    .await
    .unwrap();
    let retention = Retention::new(db.clone(), store, &settings.history);

    let deleted = retention.round().await.expect("a round");
    assert_eq!(
        (deleted.minutes, deleted.samples, deleted.records),
        (seckill::history::retention::BATCH as u64 + 1 + 4, 1, 1)
    );
    for (table, sql) in [
        ("history_items", "SELECT count(*) FROM history_items"),
        (
            "history_decisions",
            "SELECT count(*) FROM history_decisions",
        ),
        ("history_rooms", "SELECT count(*) FROM history_rooms"),
        ("history_hitters", "SELECT count(*) FROM history_hitters"),
        ("refusal_samples", "SELECT count(*) FROM refusal_samples"),
    ] {
        let left: i64 = sqlx::query_scalar(sql).fetch_one(&db).await.unwrap();
        assert_eq!(left, 1, "{table} keeps its recent row");
    }
    let seconds: Vec<i64> = sqlx::query_scalar("SELECT second FROM history_records ORDER BY 1")
        .fetch_all(&db)
        .await
        .unwrap();
    assert_eq!(seconds, [2, 3, 4]);

    // Once the stream no longer holds it, the retention alone decides.
    let _: i64 = redis::cmd("XDEL")
        .arg(stream(&settings))
        .arg(format!("{appended}-0"))
        .query_async(&mut redis)
        .await
        .unwrap();
    let deleted = retention.round().await.expect("a round");
    assert_eq!(
        (deleted.minutes, deleted.samples, deleted.records),
        (0, 0, 2)
    );
    let seconds: Vec<i64> = sqlx::query_scalar("SELECT second FROM history_records")
        .fetch_all(&db)
        .await
        .unwrap();
    assert_eq!(seconds, [4]);
}

mod topology {
    use super::*;

    /// The group, the reads, the claim and the acknowledgement on one key: one slot.
    #[sqlx::test]
    async fn a_dead_consumers_records_and_records_delivered_again_fold_once(db: PgPool) {
        let mut settings = test_settings(&db);
        quick_fold(&mut settings, 4, 100);
        let writers = ["w1", "w2"];
        let all = records(&writers, an_hour_ago(), 4);
        let first = &all[..4];
        // Before the app: a consumer reads two of the first records and dies.
        let ids = append(&settings, first).await;
        let mut redis = redis_connection(&settings).await;
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream(&settings))
            .arg(record::GROUP)
            .arg("0")
            .query_async(&mut redis)
            .await
            .expect("XGROUP CREATE");
        let _: redis::Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(record::GROUP)
            .arg("a-consumer-that-dies")
            .arg("COUNT")
            .arg(2)
            .arg("STREAMS")
            .arg(stream(&settings))
            .arg(">")
            .query_async(&mut redis)
            .await
            .expect("XREADGROUP");
        // One of its entries is deleted meanwhile: the claim answers its id apart
        // (Redis 7), out of every pending list, and the others fold.
        let _: i64 = redis::cmd("XDEL")
            .arg(stream(&settings))
            .arg(&ids[1])
            .query_async(&mut redis)
            .await
            .expect("XDEL");
        let app = spawn_app_from(settings.clone()).await;
        let kept = [&first[..1], &first[2..]].concat();
        until_folded(&settings, &db, &writers, &ids, &sums(&kept)).await;

        // Every record again (as a writer that retried would append them, or a claim
        // after a consumer committed and died), the new ones, and four malformed.
        let dropped = "seckill_history_dropped_total{what=\"record\"}";
        let dropped_before = app.metric_sum(dropped).await;
        let mut again = append(&settings, &all).await;
        again.push(append_raw(&settings, record::FIELD, "{not json").await);
        again.push(append_raw(&settings, "other", "{}").await);
        let no_instance = SecondRecord {
            second: an_hour_ago(),
            ..SecondRecord::default()
        };
        // A count that would take a row past a BIGINT: Postgres refuses its batch, then
        // that record alone; the others of its batch fold.
        let mut overflowing = record("w3", an_hour_ago(), 1);
        overflowing.decisions[0].count = i64::MAX;
        again.extend(append(&settings, &[no_instance, overflowing]).await);
        again.extend(append(&settings, first).await);
        until_folded(&settings, &db, &writers, &again, &sums(&all)).await;
        assert_eq!(app.metric_sum(dropped).await - dropped_before, 4.0);
    }
}
