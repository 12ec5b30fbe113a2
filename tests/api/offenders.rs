//! `GET /admin/api/offenders`: the merge of the instances' per-minute heavy hitters
//! (`history_hitters`, crafted here as the fold writes them), and the labels of
//! `history::classify` on crafted traffic.

use seckill::history::classify::Label;
use seckill::history::offenders::label_counts;
use seckill_test_support::{json, spawn_app};
use serde_json::{json, Value};
use sqlx::PgPool;

/// One instance's sketch entry, `ago` whole minutes before the current one (0: the
/// current, which no window covers yet).
#[allow(clippy::too_many_arguments)] // a row of the table, column by column
async fn hitter(
    db: &PgPool,
    ago: i32,
    instance: &str,
    kind: &str,
    value: &str,
    item: i64,
    count: i64,
    error: i64,
    dimensions: Value,
    others: i64,
) {
    sqlx::query(
        "INSERT INTO history_hitters (minute, instance, kind, value, item_id, count, error, dimensions, others)
         VALUES (date_trunc('minute', now()) - make_interval(mins => $1), $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(ago)
    .bind(instance)
    .bind(kind)
    .bind(value)
    .bind(item)
    .bind(count)
    .bind(error)
    .bind(dimensions)
    .bind(others)
    .execute(db)
    .await
    .expect("a hitter row");
}

fn entry<'a>(list: &'a Value, key: &str, value: Value) -> &'a Value {
    list.as_array()
        .and_then(|list| list.iter().find(|o| o[key] == value))
        .unwrap_or_else(|| panic!("{key} {value} in {list}"))
}

#[sqlx::test]
async fn the_hour_merges_instances_and_minutes_and_labels_each_offender_by_its_rule(db: PgPool) {
    let app = spawn_app(&db).await;
    let none = json!({});
    // User 7: two instances, two minutes, item 1 and item 2: summed; others the largest.
    hitter(
        &db,
        1,
        "a",
        "user",
        "7",
        1,
        50,
        2,
        json!({ "user": 40, "ip": 10 }),
        1,
    )
    .await;
    hitter(&db, 1, "b", "user", "7", 1, 30, 0, json!({ "user": 30 }), 2).await;
    hitter(&db, 3, "a", "user", "7", 2, 20, 1, json!({ "ip": 20 }), 1).await;
    // User 8: refused from 4 addresses in one minute: a scripted account.
    hitter(&db, 2, "a", "user", "8", 1, 9, 0, none.clone(), 4).await;
    // User 9: 130 a minute: a burst.
    hitter(&db, 2, "b", "user", "9", 1, 130, 0, none.clone(), 1).await;
    // User 70: quiet, but 40 accounts of its block of ids joined the queue together.
    hitter(&db, 2, "a", "user", "70", 1, 3, 0, none.clone(), 1).await;
    hitter(
        &db,
        2,
        "a",
        "join_block",
        "64-127",
        1,
        40,
        0,
        none.clone(),
        40,
    )
    .await;
    // 198.51.100.1: 30 users behind it, two refusals each a minute: shared.
    hitter(
        &db,
        1,
        "a",
        "ip",
        "198.51.100.1",
        1,
        60,
        0,
        json!({ "ip": 60 }),
        30,
    )
    .await;
    // 198.51.100.2: 50 joins in a minute from one address: a farmer.
    hitter(&db, 1, "b", "ip", "198.51.100.2", 1, 5, 0, none.clone(), 2).await;
    hitter(
        &db,
        1,
        "b",
        "join_ip",
        "198.51.100.2",
        1,
        50,
        0,
        none.clone(),
        20,
    )
    .await;
    // Older than the hour (by two minutes: a minute may turn before the ask): not
    // counted. The current minute is the next test's.
    hitter(&db, 62, "a", "user", "7", 1, 1_000, 0, none.clone(), 1).await;

    let response = app.admin_get("/admin/api/offenders?window=3600").await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    let users = &body["users"];
    let ids: Vec<i64> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![9, 7, 8, 70], "the most refused first: {body}");
    let seven = entry(users, "id", json!(7));
    assert_eq!(
        (
            &seven["refusals"],
            &seven["error"],
            &seven["dimensions"],
            &seven["others"],
            &seven["minutes"],
            &seven["label"]
        ),
        (
            &json!(100),
            &json!(3),
            &json!({ "user": 70, "ip": 30 }),
            &json!(2),
            &json!(2),
            &Value::Null
        )
    );
    assert_eq!(entry(users, "id", json!(8))["label"], "scripted_account");
    assert_eq!(entry(users, "id", json!(9))["label"], "burst_source");
    assert_eq!(entry(users, "id", json!(70))["label"], "queue_farmer");
    let addresses = &body["addresses"];
    assert_eq!(
        entry(addresses, "ip", json!("198.51.100.1"))["label"],
        "shared_address"
    );
    assert_eq!(
        entry(addresses, "ip", json!("198.51.100.2"))["label"],
        "queue_farmer"
    );

    // One item: user 7's item-2 minute is not in it.
    let item_two = json(
        app.admin_get("/admin/api/offenders?window=3600&item=2")
            .await,
    )
    .await;
    assert_eq!(
        item_two["users"],
        json!([entry(&item_two["users"], "id", json!(7))])
    );
    assert_eq!(item_two["users"][0]["refusals"], 20);

    // The gauge's counts: every label of the hour, the farmer twice (a user's block and
    // an address; the block counts once more on its own as a farming block).
    let counts = label_counts(&db).await.expect("counts");
    assert_eq!(counts[&Label::SharedAddress], 1);
    assert_eq!(counts[&Label::ScriptedAccount], 1);
    assert_eq!(counts[&Label::BurstSource], 1);
    assert_eq!(counts[&Label::QueueFarmer], 3);
}

#[sqlx::test]
async fn the_minute_window_is_the_last_complete_minute(db: PgPool) {
    let app = spawn_app(&db).await;
    // A different count in each of the last three minutes: which one the answer holds
    // says which minute it covered, even if a minute turned between insert and ask.
    for (ago, count) in [(0, 5), (1, 11), (2, 13)] {
        hitter(&db, ago, "a", "ip", "192.0.2.1", 0, count, 0, json!({}), 1).await;
    }
    let inserted: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT max(minute) FROM history_hitters")
            .fetch_one(&db)
            .await
            .expect("the current minute at insert");
    let body = json(app.admin_get("/admin/api/offenders?window=60").await).await;
    let from: chrono::DateTime<chrono::Utc> = serde_json::from_value(body["from"].clone()).unwrap();
    let to: chrono::DateTime<chrono::Utc> = serde_json::from_value(body["to"].clone()).unwrap();
    assert_eq!(to - from, chrono::Duration::minutes(1));
    let expected = if to == inserted { 11 } else { 5 };
    assert_eq!(body["addresses"][0]["refusals"], expected, "{body}");
    assert_eq!(body["addresses"].as_array().map(Vec::len), Some(1));
}

#[sqlx::test]
async fn a_window_other_than_a_minute_or_an_hour_is_refused(db: PgPool) {
    let app = spawn_app(&db).await;
    for query in ["window=600", "window=", "", "window=60&item=0"] {
        let response = app
            .admin_get(&format!("/admin/api/offenders?{query}"))
            .await;
        let status = response.status();
        let body = json(response).await;
        assert!(status == 400 || status == 404, "{query}: {status} {body}");
        assert_ne!(body["code"], "INTERNAL", "{query}");
    }
    let bad = json(app.admin_get("/admin/api/offenders?window=600").await).await;
    assert_eq!(
        (bad["code"].as_str(), bad["field"].as_str()),
        (Some("VALIDATION_FAILED"), Some("window"))
    );
}
