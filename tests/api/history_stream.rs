//! The decision stream (docs/history.md, "The decision stream"): each instance's stats
//! flush appends, once a second, what it counted since its last record; summed over the
//! records of every instance, the stream says exactly what the requests were answered.
//! The tests read the stream itself, so their instances do not fold it (a fold deletes
//! what it folds): `history.fold_every_ms = 0`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json as json_value, Value};
use sqlx::PgPool;

use seckill::stats::record::{stream_key, SecondRecord, FIELD};
use seckill_test_support::{eventually, ip_of, json, spawn_app_from, spawn_app_with, TestApp};

/// Every record of the test's stream, oldest first.
async fn records(app: &TestApp) -> Vec<SecondRecord> {
    let mut conn = app.redis().await;
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(stream_key(&app.settings.redis_key_prefix))
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .expect("XRANGE");
    entries
        .into_iter()
        .map(|(_, fields)| {
            assert_eq!(fields.len(), 2, "one field per entry");
            assert_eq!(fields[0], FIELD);
            serde_json::from_str(&fields[1]).expect("a record")
        })
        .collect()
}

/// What a purchase's answer says happened, in the record's words: the outcome, or
/// `rejected:<rule>` for the limiter's refusal.
fn outcome_of(status: u16, body: &Value) -> String {
    match (status, body["code"].as_str()) {
        (200, _) => "created".into(),
        (429, Some("RATE_LIMITED")) => {
            format!("rejected:{}", body["dimension"].as_str().unwrap())
        }
        (409, Some("SOLD_OUT")) => "sold_out".into(),
        (409, Some("ALREADY_PURCHASED")) => "already_purchased".into(),
        other => panic!("an answer the test did not plan: {other:?} {body}"),
    }
}

/// One purchase as sent: who, from where, on which item, and its outcome.
struct Sent {
    user: i64,
    ip: String,
    item: i64,
    outcome: String,
}

/// Sends every purchase of `plan` (user, address, item) at once, over the two
/// instances in turn.
async fn buy_all(apps: [&TestApp; 2], plan: Vec<(i64, String, i64)>) -> Vec<Sent> {
    let mut tokens = Vec::new();
    for (user, _, _) in &plan {
        tokens.push(apps[0].token_for(*user).await);
    }
    let requests =
        plan.into_iter()
            .zip(tokens)
            .enumerate()
            .map(|(i, ((user, ip, item), token))| {
                let app = apps[i % 2];
                async move {
                    let response = app.post_seckill(&token, item, &ip).await;
                    let status = response.status().as_u16();
                    let body = json(response).await;
                    Sent {
                        user,
                        ip,
                        item,
                        outcome: outcome_of(status, &body),
                    }
                }
            });
    futures_util::future::join_all(requests).await
}

/// The records' per item outcomes, summed over records and instances.
fn summed_outcomes(records: &[SecondRecord]) -> BTreeMap<(i64, String), i64> {
    let mut sums = BTreeMap::new();
    for record in records {
        for item in &record.items {
            for (outcome, count) in &item.outcomes {
                *sums.entry((item.item, outcome.clone())).or_insert(0) += count;
            }
        }
    }
    sums
}

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

    #[sqlx::test]
    async fn the_records_of_two_instances_add_up_to_exactly_what_the_purchases_were_answered(
        db: PgPool,
    ) {
        let a = spawn_app_with(&db, |s| {
            s.history.fold_every_ms = 0;
            s.history.sample_every = 1;
            // 12 admissions a minute for the whole sale: the last purchases are refused
            // by it, however the earlier ones fared.
            let seckill = s.limiter.policies.get_mut("seckill").unwrap();
            seckill.rules[0].window_ms = 60_000;
            seckill.rules[0].threshold = 12;
        })
        .await;
        let b = spawn_app_from(a.settings.clone()).await;
        let plenty = a.open_item(100).await;
        let scarce = a.open_item(2).await;
        b.until_items_listed(2).await;

        // User 1 five times from five addresses (3 a minute: 2 refused by `user`); seven
        // users from one address (5 a minute: 2 refused by `ip`): 8 admissions.
        let by_user = (1..=5).map(|i| (1, format!("10.91.1.{i}"), plenty));
        let by_ip = (11..=17).map(|user| (user, "10.91.2.1".to_string(), plenty));
        let mut sent = buy_all([&a, &b], by_user.chain(by_ip).collect()).await;
        // Four buyers of two units; then 15 more than `api` has left.
        let scarce_buyers = (21..=24).map(|user| (user, format!("10.91.3.{user}"), scarce));
        sent.extend(buy_all([&a, &b], scarce_buyers.collect()).await);
        let late = (31..=45).map(|user| (user, format!("10.91.4.{user}"), plenty));
        sent.extend(buy_all([&a, &b], late.collect()).await);

        let mut expected: BTreeMap<(i64, String), i64> = BTreeMap::new();
        for s in &sent {
            *expected.entry((s.item, s.outcome.clone())).or_insert(0) += 1;
        }
        for outcome in [
            "rejected:user",
            "rejected:ip",
            "rejected:api",
            "sold_out",
            "created",
        ] {
            assert!(
                expected.keys().any(|(_, o)| o == outcome),
                "the sale has a {outcome}: {expected:?}"
            );
        }
        let (records, _) = eventually(
            "both instances' records add up to the answers",
            Duration::from_secs(10),
            || async {
                let records = records(&a).await;
                (summed_outcomes(&records) == expected).then_some(records)
            },
        )
        .await;

        // Per instance, the seconds strictly increase; two instances wrote.
        let mut seconds: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for record in &records {
            seconds
                .entry(&record.instance)
                .or_default()
                .push(record.second);
        }
        assert_eq!(seconds.len(), 2, "{seconds:?}");
        for (instance, seconds) in &seconds {
            assert!(
                seconds.windows(2).all(|w| w[0] < w[1]),
                "{instance}: {seconds:?}"
            );
        }

        // The limiter's refusals by rule, every policy: the sale's, as answered.
        let mut rejects: BTreeMap<String, i64> = BTreeMap::new();
        for record in &records {
            for d in &record.decisions {
                if d.policy == "seckill" && d.outcome == "reject" {
                    *rejects.entry(d.rule.clone()).or_insert(0) += d.count;
                }
            }
        }
        let mut refused: BTreeMap<String, i64> = BTreeMap::new();
        for s in &sent {
            if let Some(rule) = s.outcome.strip_prefix("rejected:") {
                *refused.entry(rule.to_string()).or_insert(0) += 1;
            }
        }
        assert_eq!(rejects, refused);

        // At one in one, the samples are the refused requests themselves.
        let mut sampled: Vec<(i64, String, String, i64)> = records
            .iter()
            .flat_map(|r| &r.samples)
            .map(|s| {
                assert_eq!(s.policy, "seckill");
                (
                    s.user.unwrap(),
                    s.ip.clone().unwrap(),
                    s.rule.clone(),
                    s.item.unwrap(),
                )
            })
            .collect();
        let mut wanted: Vec<(i64, String, String, i64)> = sent
            .iter()
            .filter_map(|s| {
                let rule = s.outcome.strip_prefix("rejected:")?;
                Some((s.user, s.ip.clone(), rule.to_string(), s.item))
            })
            .collect();
        sampled.sort();
        wanted.sort();
        assert_eq!(sampled, wanted);
        assert!(records.iter().all(|r| r.samples_dropped == 0));
    }

    #[sqlx::test]
    async fn a_record_that_finds_the_stream_at_its_cap_is_dropped_and_counted(db: PgPool) {
        let app = spawn_app_with(&db, |s| {
            s.history.fold_every_ms = 0;
            s.history.stream_max_len = 2;
        })
        .await;
        let item = app.open_item(10).await;
        let token = app.token_for(7).await;
        let dropped = r#"seckill_history_dropped_total{what="record"}"#;
        let attempted =
            || async { records(&app).await.len() as i64 + app.metric_sum(dropped).await as i64 };
        // Each purchase once the previous one's record was attempted: three records at
        // least, for a cap of two.
        for purchase in 1..=3 {
            let response = app
                .post_seckill(&token, item, &format!("10.92.0.{purchase}"))
                .await;
            assert!([200, 409].contains(&response.status().as_u16()));
            eventually("a record per purchase", Duration::from_secs(10), || async {
                (attempted().await >= purchase).then_some(())
            })
            .await;
        }
        let kept = records(&app).await;
        assert_eq!(kept.len(), 2, "the cap holds");
        let lost = app.metric_sum(dropped).await;
        assert!(lost >= 1.0, "{lost} dropped");
        // The oldest stay (they may not be folded yet): the first purchase's order is
        // in them, whichever flush counted it.
        let outcomes = summed_outcomes(&kept);
        assert_eq!(outcomes.get(&(item, "created".into())), Some(&1));
        assert_eq!(app.metric_sum("seckill_history_backlog ").await, 2.0);
        assert_eq!(app.metric_sum("seckill_history_backlog_cap ").await, 2.0);
    }

    #[sqlx::test]
    async fn the_rooms_joins_admissions_and_waits_add_up_over_two_instances(db: PgPool) {
        let a = spawn_app_with(&db, |s| s.history.fold_every_ms = 0).await;
        let b = spawn_app_from(a.settings.clone()).await;
        let item = a.open_item(100).await;
        let room = json_value!({ "enabled": true, "order": "fifo", "admitPerSecond": 50 });
        assert_eq!(a.set_room(item, room).await.status(), 200);
        // Joins alternate between the instances (the other one once it has read the
        // room); each shopper joins on one instance only.
        for user in 1..=8 {
            let app = if user % 2 == 0 { &a } else { &b };
            let token = app.token_for(user).await;
            eventually("the join", Duration::from_secs(5), || async {
                let response = app.join_queue(&token, item, &ip_of(user)).await;
                (response.status() == 200).then_some(())
            })
            .await;
        }
        eventually(
            "every joiner admitted, each wait counted once",
            Duration::from_secs(10),
            || async {
                let (mut joins, mut admissions, mut waits) = (0, 0, 0);
                for record in records(&a).await {
                    for counts in record.items.iter().filter(|c| c.item == item) {
                        joins += counts.room.joins;
                        admissions += counts.room.admissions;
                        waits += counts.room.waits.iter().sum::<i64>();
                    }
                }
                (joins == 8 && admissions == 8 && waits == 8).then_some(())
            },
        )
        .await;
    }
}
