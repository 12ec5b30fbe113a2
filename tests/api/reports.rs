//! `GET /admin/api/history` and `GET /admin/api/items/{id}/report`: what the sale
//! remembers, read back from rows put straight into the history tables (the fold's
//! output, its contract) and from orders placed through the real API.

use chrono::{DateTime, Duration, DurationRound, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;

use seckill_test_support::{json, spawn_app, spawn_app_with, TestApp};

fn at(s: &str) -> DateTime<Utc> {
    s.parse().expect("an instant")
}

async fn item_row(db: &PgPool, item: i64, minute: DateTime<Utc>, outcome: &str, count: i64) {
    sqlx::query(
        "INSERT INTO history_items (item_id, minute, outcome, count) VALUES ($1, $2, $3, $4)",
    )
    .bind(item)
    .bind(minute)
    .bind(outcome)
    .bind(count)
    .execute(db)
    .await
    .expect("a history_items row");
}

async fn decision_row(db: &PgPool, minute: DateTime<Utc>, rule: &str, outcome: &str, count: i64) {
    sqlx::query(
        "INSERT INTO history_decisions (policy, minute, rule, outcome, count) \
         VALUES ('seckill', $1, $2, $3, $4)",
    )
    .bind(minute)
    .bind(rule)
    .bind(outcome)
    .bind(count)
    .execute(db)
    .await
    .expect("a history_decisions row");
}

/// A room's minute: joins, admissions, abandons and admissions by wait bucket.
async fn room_row(db: &PgPool, item: i64, minute: DateTime<Utc>, counts: [i64; 3], waits: &[i64]) {
    sqlx::query(
        "INSERT INTO history_rooms (item_id, minute, joins, admissions, abandons, waits) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(item)
    .bind(minute)
    .bind(counts[0])
    .bind(counts[1])
    .bind(counts[2])
    .bind(waits)
    .execute(db)
    .await
    .expect("a history_rooms row");
}

/// Two minutes of item 7 (one in the next hour), its room, and the sale policy's
/// decisions, on 4 December 2026 from 10:58.
async fn two_hours_of_history(db: &PgPool) {
    let (m1, m2, m3) = (
        at("2026-12-04T10:58:00Z"),
        at("2026-12-04T10:59:00Z"),
        at("2026-12-04T11:00:00Z"),
    );
    item_row(db, 7, m1, "created", 3).await;
    item_row(db, 7, m1, "rejected:user", 2).await;
    item_row(db, 7, m2, "created", 1).await;
    item_row(db, 7, m3, "sold_out", 4).await;
    item_row(db, 8, m1, "created", 1).await;
    room_row(db, 7, m2, [5, 4, 1], &[3, 0, 1]).await;
    decision_row(db, m1, "user", "reject", 2).await;
    decision_row(db, m2, "user", "pass", 6).await;
}

async fn history(app: &TestApp, query: &str) -> Value {
    let response = app.admin_get(&format!("/admin/api/history?{query}")).await;
    assert_eq!(response.status(), 200, "{query}");
    json(response).await
}

/// Each row as `at source item policy rule outcome count`, for short exact asserts.
fn lines(body: &Value) -> Vec<String> {
    let text = |v: &Value| match v {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    body["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            ["at", "source", "item", "policy", "rule", "outcome", "count"]
                .iter()
                .map(|f| text(&r[*f]))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

const DAY: &str = "from=2026-12-04T00:00:00Z&to=2026-12-05T00:00:00Z";

#[sqlx::test]
async fn history_answers_each_minutes_rows_and_sums_them_per_hour(db: PgPool) {
    let app = spawn_app(&db).await;
    two_hours_of_history(&db).await;

    let item = history(&app, &format!("{DAY}&item=7")).await;
    assert_eq!(item["step"], "minute");
    assert_eq!(item["from"], "2026-12-04T00:00:00Z");
    assert_eq!(
        lines(&item),
        [
            "2026-12-04T10:58:00Z item 7 - - created 3",
            "2026-12-04T10:58:00Z item 7 - - rejected:user 2",
            "2026-12-04T10:59:00Z item 7 - - created 1",
            "2026-12-04T10:59:00Z room 7 - - abandons 1",
            "2026-12-04T10:59:00Z room 7 - - admissions 4",
            "2026-12-04T10:59:00Z room 7 - - joins 5",
            "2026-12-04T10:59:00Z room 7 - - wait_le_1 3",
            "2026-12-04T10:59:00Z room 7 - - wait_le_5 1",
            "2026-12-04T11:00:00Z item 7 - - sold_out 4",
        ]
    );

    let policy = history(&app, &format!("{DAY}&policy=seckill&step=hour")).await;
    assert_eq!(
        lines(&policy),
        [
            "2026-12-04T10:00:00Z decision - seckill user pass 6",
            "2026-12-04T10:00:00Z decision - seckill user reject 2",
        ]
    );

    // Everything, per hour: both items' minutes of 10:xx summed, the decisions beside.
    let all = history(&app, &format!("{DAY}&step=hour")).await;
    assert_eq!(
        lines(&all),
        [
            "2026-12-04T10:00:00Z decision - seckill user pass 6",
            "2026-12-04T10:00:00Z decision - seckill user reject 2",
            "2026-12-04T10:00:00Z item 7 - - created 4",
            "2026-12-04T10:00:00Z item 7 - - rejected:user 2",
            "2026-12-04T10:00:00Z item 8 - - created 1",
            "2026-12-04T10:00:00Z room 7 - - abandons 1",
            "2026-12-04T10:00:00Z room 7 - - admissions 4",
            "2026-12-04T10:00:00Z room 7 - - joins 5",
            "2026-12-04T10:00:00Z room 7 - - wait_le_1 3",
            "2026-12-04T10:00:00Z room 7 - - wait_le_5 1",
            "2026-12-04T11:00:00Z item 7 - - sold_out 4",
        ]
    );

    // `to` is excluded: 11:00 is left out.
    let before_eleven = history(
        &app,
        "item=7&from=2026-12-04T10:59:00Z&to=2026-12-04T11:00:00Z",
    )
    .await;
    assert_eq!(lines(&before_eleven).len(), 6);
}

#[sqlx::test]
async fn history_as_csv_is_streamed_with_a_header_and_every_row(db: PgPool) {
    let app = spawn_app(&db).await;
    two_hours_of_history(&db).await;
    // 2 500 minutes of one outcome: three batches of the export.
    sqlx::query(
        "INSERT INTO history_items (item_id, minute, outcome, count) \
         SELECT 9, timestamptz '2026-12-01T00:00:00Z' + n * interval '1 minute', 'created', n \
         FROM generate_series(1, 2500) AS n",
    )
    .execute(&db)
    .await
    .unwrap();

    let by_format = app
        .admin_get(&format!(
            "/admin/api/history?{DAY}&policy=seckill&format=csv"
        ))
        .await;
    assert_eq!(by_format.status(), 200);
    assert_eq!(
        by_format.headers()["content-type"],
        "text/csv; charset=utf-8"
    );
    assert_eq!(
        by_format.text().await.unwrap(),
        "at,source,item,policy,rule,outcome,count\n\
         2026-12-04T10:58:00+00:00,decision,,seckill,user,reject,2\n\
         2026-12-04T10:59:00+00:00,decision,,seckill,user,pass,6\n"
    );

    let by_accept = app
        .client
        .get(app.url("/admin/api/history?item=9&from=2026-12-01T00:00:00Z&to=2026-12-03T00:00:00Z"))
        .bearer_auth(seckill_test_support::ADMIN_TOKEN)
        .header("Accept", "text/csv")
        .send()
        .await
        .unwrap();
    assert_eq!(by_accept.status(), 200);
    assert_eq!(
        by_accept.headers()["content-type"],
        "text/csv; charset=utf-8"
    );
    // Streamed: no length known before the body.
    assert_eq!(by_accept.headers().get("content-length"), None);
    let body = by_accept.text().await.unwrap();
    let rows: Vec<&str> = body.lines().collect();
    assert_eq!(rows[0], "at,source,item,policy,rule,outcome,count");
    assert_eq!(rows.len(), 2_501);
    // In order, each once: the count is the minute's number.
    for (n, row) in rows[1..].iter().enumerate() {
        let count: usize = row.rsplit(',').next().unwrap().parse().unwrap();
        assert_eq!(count, n + 1, "{row}");
    }
}

#[sqlx::test]
async fn history_past_its_bounds_is_refused_naming_the_field(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        s.history.max_range_days = 2;
        s.history.max_rows = 8;
    })
    .await;
    two_hours_of_history(&db).await;
    for (query, field) in [
        ("from=2026-12-01T00:00:00Z&to=2026-12-04T00:00:00Z", "to"),
        ("from=2026-12-04T00:00:00Z&to=2026-12-04T00:00:00Z", "to"),
        // Nine rows of item 7 in the day: more than 8.
        (&format!("{DAY}&item=7") as &str, "to"),
        (&format!("{DAY}&item=7&format=csv") as &str, "to"),
        ("step=day", "step"),
        ("from=yesterday", "from"),
        ("item=-1", "item"),
        ("policy=seckill%00", "policy"),
        ("format=xml", "format"),
    ] {
        let response = app.admin_get(&format!("/admin/api/history?{query}")).await;
        assert_eq!(response.status(), 400, "{query}");
        let body = json(response).await;
        assert_eq!(body["code"], "VALIDATION_FAILED", "{query}");
        assert_eq!(body["field"], field, "{query}: {body}");
    }
    // Per hour, the same day fits: 8 rows.
    let hourly = history(&app, &format!("{DAY}&item=7&step=hour")).await;
    assert_eq!(lines(&hourly).len(), 8);

    for path in ["/admin/api/history", "/admin/api/items/1/report"] {
        let anonymous = app.get(path).await;
        assert_eq!(anonymous.status(), 401, "{path}");
    }
}

async fn report(app: &TestApp, item: i64) -> Value {
    let response = app
        .admin_get(&format!("/admin/api/items/{item}/report"))
        .await;
    assert_eq!(response.status(), 200);
    json(response).await
}

#[sqlx::test]
async fn a_sales_report_joins_the_history_with_its_orders(db: PgPool) {
    let app = spawn_app(&db).await;
    let item = app.open_item(3).await;
    let mut orders = Vec::new();
    for user in 1..=3 {
        orders.push(app.buy(user, item).await);
    }
    let (token, order) = &orders[0];
    let paid = app
        .order_call(token, order["orderId"].as_str().unwrap(), "pay", None)
        .await;
    assert_eq!(paid.status(), 200);
    let (token, order) = &orders[1];
    let cancelled = app
        .order_call(token, order["orderId"].as_str().unwrap(), "cancel", None)
        .await;
    assert_eq!(cancelled.status(), 200);

    // The orders' times set where the test wants them: the sale's minute 0 (two) and
    // minute 1 (one, the last unit, 30 s into it).
    let starts_at: DateTime<Utc> = sqlx::query_scalar("SELECT starts_at FROM items WHERE id = $1")
        .bind(item)
        .fetch_one(&db)
        .await
        .unwrap();
    let m0 = starts_at.duration_trunc(Duration::minutes(1)).unwrap();
    let m1 = m0 + Duration::minutes(1);
    let last_unit = m1 + Duration::seconds(30);
    for (user, at) in [(1, m0), (2, m0), (3, last_unit)] {
        sqlx::query("UPDATE orders SET created_at = $1 WHERE item_id = $2 AND user_id = $3")
            .bind(at)
            .bind(item)
            .bind(user)
            .execute(&db)
            .await
            .unwrap();
    }
    let m3 = m0 + Duration::minutes(3);
    item_row(&db, item, m0, "created", 2).await;
    item_row(&db, item, m0, "rejected:user", 5).await;
    item_row(&db, item, m1, "created", 1).await;
    item_row(&db, item, m1, "rejected:ip", 2).await;
    item_row(&db, item, m1, "order_failed", 1).await;
    item_row(&db, item, m3, "sold_out", 7).await;
    item_row(&db, item, m3, "limiter_unavailable", 2).await;
    // 20 admissions: 9 within a second, 9 over 2 s and up to 5 s, 2 over an hour.
    room_row(&db, item, m0, [12, 10, 1], &[9, 0, 1]).await;
    let mut waits = vec![0; 13];
    waits[2] = 8;
    waits[12] = 2;
    room_row(&db, item, m1, [8, 10, 2], &waits).await;

    let body = report(&app, item).await;
    assert_eq!(body["item"]["id"], item);
    assert_eq!(body["item"]["totalStock"], 3);
    assert_eq!(body["item"]["unitsLeft"], 1);
    assert_eq!(
        body["queue"],
        json!({"joined": 20, "admitted": 20, "abandoned": 3})
    );
    assert_eq!(
        body["orders"],
        json!({"bought": 3, "pendingPayment": 1, "paid": 1, "cancelled": 1, "expired": 0})
    );
    assert_eq!(body["attempts"], 20);
    assert_eq!(body["refused"], json!({"ip": 2, "user": 5}));
    assert_eq!(body["errors"], 3);
    assert_eq!(body["outcomes"]["sold_out"], 7);
    assert_eq!(body["peak"]["orders"], 2);
    assert_eq!(
        body["peak"]["minute"]
            .as_str()
            .and_then(|m| m.parse::<DateTime<Utc>>().ok()),
        Some(m0)
    );
    assert_eq!(
        body["soldOut"]["at"]
            .as_str()
            .and_then(|m| m.parse::<DateTime<Utc>>().ok()),
        Some(last_unit)
    );
    let after = (last_unit - starts_at).num_milliseconds() as f64 / 1_000.0;
    assert_eq!(body["soldOut"]["secondsFromStart"], after);
    assert_eq!(body["waits"]["admitted"], 20);
    assert_eq!(
        body["waits"]["median"],
        json!({"overSecs": 2, "upToSecs": 5, "count": 9})
    );
    assert_eq!(
        body["waits"]["p95"],
        json!({"overSecs": 3600, "upToSecs": null, "count": 2})
    );
    assert_eq!(body["offenders"], json!({"users": [], "addresses": []}));

    // Four minutes, the empty one (m2) included.
    let minutes: Vec<_> = body["minutes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["attempts"].as_i64().unwrap(),
                m["admitted"].as_i64().unwrap(),
                m["sold"].as_i64().unwrap(),
                m["errors"].as_i64().unwrap(),
                m["refused"].clone(),
            )
        })
        .collect();
    assert_eq!(
        minutes,
        [
            (7, 10, 2, 0, json!({"ip": 0, "user": 5})),
            (4, 10, 1, 1, json!({"ip": 2, "user": 0})),
            (0, 0, 0, 0, json!({"ip": 0, "user": 0})),
            (9, 0, 0, 2, json!({"ip": 0, "user": 0})),
        ]
    );

    let csv = app
        .admin_get(&format!("/admin/api/items/{item}/report?format=csv"))
        .await;
    assert_eq!(csv.status(), 200);
    assert_eq!(csv.headers()["content-type"], "text/csv; charset=utf-8");
    let minute = |m: DateTime<Utc>| m.to_rfc3339();
    assert_eq!(
        csv.text().await.unwrap(),
        format!(
            "minute,attempts,admitted,sold,errors,refused_ip,refused_user\n\
             {},7,10,2,0,0,5\n{},4,10,1,1,2,0\n{},0,0,0,0,0,0\n{},9,0,0,2,0,0\n",
            minute(m0),
            minute(m1),
            minute(m0 + Duration::minutes(2)),
            minute(m3),
        )
    );
}

#[sqlx::test]
async fn a_report_of_an_item_without_history_or_of_no_item(db: PgPool) {
    let app = spawn_app(&db).await;
    let item = app.open_item(5).await;
    let body = report(&app, item).await;
    assert_eq!(body["attempts"], 0);
    assert_eq!(body["peak"], Value::Null);
    assert_eq!(body["soldOut"], Value::Null);
    assert_eq!(body["waits"]["median"], Value::Null);
    assert_eq!(body["minutes"], json!([]));
    for id in [item + 1, 0, -3] {
        let response = app
            .admin_get(&format!("/admin/api/items/{id}/report"))
            .await;
        assert_eq!(response.status(), 404, "{id}");
        assert_eq!(json(response).await["code"], "ITEM_NOT_FOUND");
    }
}
