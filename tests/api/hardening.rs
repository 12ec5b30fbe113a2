//! The sale under retries, stampedes, crashes and a Redis that lost its data.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;

use crate::helpers::{
    eventually, failpoint_lock, json, pg_orders, pg_remaining, spawn_app, spawn_app_from,
    spawn_app_with, test_settings, use_own_redis, OwnRedis, TestApp,
};

async fn purchase_with_key(app: &TestApp, token: &str, item: i64, key: &str) -> reqwest::Response {
    app.client
        .post(app.url("/seckill"))
        .bearer_auth(token)
        .header("X-Forwarded-For", "10.20.0.1")
        .header("Idempotency-Key", key)
        .json(&serde_json::json!({ "itemId": item }))
        .send()
        .await
        .unwrap()
}

async fn redis_int(app: &TestApp, cmd: &str, key: &str) -> Option<i64> {
    let mut conn = app.redis().await;
    redis::cmd(cmd)
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// A quick reconciler: deadlines and periods short enough for a test to watch (the
/// deadline just above what `Settings::check_timeouts` asks for).
fn fast_reconciler(s: &mut seckill::configuration::Settings) {
    s.order_commit_timeout_ms = 300;
    s.database_statement_timeout_ms = 500;
    s.database_idle_in_transaction_timeout_ms = 500;
    s.reservation_deadline_ms = 2_500;
    s.reconcile_interval_ms = 200;
}

#[sqlx::test]
async fn twenty_concurrent_requests_with_one_key_make_one_order_and_one_charge(db: PgPool) {
    let app = spawn_app_with(&db, |_| {}).await;
    let item = app.open_item(10).await;
    let token = app.token_for(31).await;
    let responses = futures_util::future::join_all(
        (0..20).map(|_| purchase_with_key(&app, &token, item, "buy-once")),
    )
    .await;
    let mut answers = Vec::new();
    for response in responses {
        answers.push((response.status().as_u16(), response.text().await.unwrap()));
    }
    let successes: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status == 200)
        .collect();
    assert!(!successes.is_empty(), "{answers:?}");
    assert!(
        successes.iter().all(|(_, body)| body == &successes[0].1),
        "every 200 is the stored answer"
    );
    for (status, body) in &answers {
        if *status != 200 {
            assert_eq!(*status, 409, "{body}");
            assert!(body.contains("IDEMPOTENCY_IN_PROGRESS"), "{body}");
        }
    }
    assert_eq!(pg_orders(&db, item).await, 1);
    let charges = app
        .metric_sum(
            r#"seckill_limiter_decisions_total{dimension="user",outcome="pass",policy="seckill"}"#,
        )
        .await;
    assert_eq!(charges, 1.0, "one limiter charge");

    let replay = purchase_with_key(&app, &token, item, "buy-once").await;
    assert_eq!(replay.status(), 200);
    assert_eq!(
        replay.text().await.unwrap(),
        successes[0].1,
        "the replay is identical"
    );

    let other_item = app.open_item(10).await;
    let mismatch = purchase_with_key(&app, &token, other_item, "buy-once").await;
    assert_eq!(mismatch.status(), 422);
    assert_eq!(json(mismatch).await["code"], "IDEMPOTENCY_MISMATCH");
    let invalid = purchase_with_key(&app, &token, item, "not a key!").await;
    assert_eq!(invalid.status(), 400);
    assert_eq!(json(invalid).await["field"], "Idempotency-Key");
}

#[sqlx::test]
async fn refusals_worth_retrying_free_the_key(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        s.limiter.policies.get_mut("seckill").unwrap().rules[1].threshold = 1;
    })
    .await;
    let (first, second) = (app.open_item(10).await, app.open_item(10).await);
    let token = app.token_for(32).await;
    assert_eq!(
        purchase_with_key(&app, &token, first, "k1").await.status(),
        200
    );
    // 429 is not stored: the same key may be retried later and is not "in progress".
    assert_eq!(
        purchase_with_key(&app, &token, second, "k2").await.status(),
        429
    );
    let again = purchase_with_key(&app, &token, second, "k2").await;
    assert_eq!(
        again.status(),
        429,
        "retried for real, not replayed or in progress"
    );
}

#[sqlx::test]
async fn after_sell_out_both_instances_answer_from_memory_without_redis(db: PgPool) {
    let first = spawn_app_with(&db, |_| {}).await;
    let second = spawn_app_from(first.settings.clone()).await;
    let item = first.open_item(2).await;
    for user in [41, 42] {
        let token = first.token_for(user).await;
        assert_eq!(
            first
                .post_seckill(&token, item, &format!("10.21.0.{user}"))
                .await
                .status(),
            200
        );
    }
    for app in [&first, &second] {
        eventually(
            "the instance knows the item and that it is sold out",
            Duration::from_secs(10),
            || async {
                let listed = json(app.get("/api/items").await).await["items"]
                    .as_array()?
                    .len()
                    == 1;
                (listed && app.metric_sum("seckill_sold_out_items").await == 1.0).then_some(())
            },
        )
        .await;
    }
    let mut before = Vec::new();
    for app in [&first, &second] {
        before.push((
            app.metric_sum(r#"seckill_redis_calls_total{purpose="limiter"}"#)
                .await,
            app.metric_sum(r#"seckill_redis_calls_total{purpose="reservation"}"#)
                .await,
        ));
    }
    let token = first.token_for(43).await;
    let requests = (0..1000).map(|i| {
        let app = if i % 2 == 0 { &first } else { &second };
        app.post_seckill(&token, item, "10.21.1.1")
    });
    let mut codes: HashMap<String, usize> = HashMap::new();
    for response in futures_util::future::join_all(requests).await {
        let status = response.status().as_u16();
        let code = json(response).await["code"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        *codes.entry(format!("{status} {code}")).or_default() += 1;
    }
    assert_eq!(codes, HashMap::from([("409 SOLD_OUT".to_string(), 1000)]));
    for (app, before) in [&first, &second].into_iter().zip(before) {
        let after = (
            app.metric_sum(r#"seckill_redis_calls_total{purpose="limiter"}"#)
                .await,
            app.metric_sum(r#"seckill_redis_calls_total{purpose="reservation"}"#)
                .await,
        );
        assert_eq!(after, before, "no limiter and no reservation call");
    }
}

#[sqlx::test]
async fn a_crash_between_reservation_and_commit_is_undone_by_the_reconciler(db: PgPool) {
    let app = spawn_app_with(&db, fast_reconciler).await;
    let second = spawn_app_from(app.settings.clone()).await;
    let item = app.open_item(1).await;
    let user = 880_001;
    let token = app.token_for(user).await;

    fail::cfg("sale::before_commit", &format!("return({user})")).unwrap();
    let crashed = app.post_seckill(&token, item, "10.22.0.1").await;
    fail::remove("sale::before_commit");
    assert_eq!(crashed.status(), 503);
    assert_eq!(
        redis_int(&app, "GET", &app.item_keys(item).stock()).await,
        Some(0),
        "the unit is reserved"
    );
    for instance in [&app, &second] {
        eventually(
            "the last unit reserved: sold out everywhere",
            Duration::from_secs(10),
            || async { (instance.metric_sum("seckill_sold_out_items").await == 1.0).then_some(()) },
        )
        .await;
    }

    let (_, took) = eventually(
        "the reconciler gives the unit back",
        Duration::from_secs(10),
        || async {
            (redis_int(&app, "GET", &app.item_keys(item).stock()).await == Some(1)).then_some(())
        },
    )
    .await;
    println!("abandoned reservation released after {took:?}");
    assert_eq!(
        redis_int(&app, "ZCARD", &app.item_keys(item).pending()).await,
        Some(0)
    );
    assert_eq!(
        redis_int(&app, "GET", &app.item_keys(item).success()).await,
        Some(0)
    );
    for instance in [&app, &second] {
        eventually(
            "stock is back: the sold-out flag is lifted everywhere",
            Duration::from_secs(10),
            || async { (instance.metric_sum("seckill_sold_out_items").await == 0.0).then_some(()) },
        )
        .await;
    }
    assert_eq!(
        app.post_seckill(&token, item, "10.22.0.1").await.status(),
        200,
        "the user can buy again"
    );
    assert_eq!(pg_orders(&db, item).await, 1);
}

#[sqlx::test]
async fn a_crash_after_the_commit_keeps_the_order_and_redis_agrees(db: PgPool) {
    let app = spawn_app_with(&db, fast_reconciler).await;
    let item = app.open_item(5).await;
    let user = 880_002;
    let token = app.token_for(user).await;

    fail::cfg("sale::after_commit", &format!("return({user})")).unwrap();
    let crashed = app.post_seckill(&token, item, "10.23.0.1").await;
    fail::remove("sale::after_commit");
    assert_eq!(crashed.status(), 503, "the client never heard of its order");
    assert_eq!(pg_orders(&db, item).await, 1, "but the order stands");

    app.until_nothing_pending(
        item,
        "the reconciler settles the pending reservation",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        redis_int(&app, "GET", &app.item_keys(item).stock()).await,
        Some(4)
    );
    assert_eq!(
        redis_int(&app, "GET", &app.item_keys(item).success()).await,
        Some(1)
    );
    let remaining = pg_remaining(&db, item).await;
    assert_eq!(remaining, 4);
    let again = app.post_seckill(&token, item, "10.23.0.1").await;
    assert_eq!(json(again).await["code"], "ALREADY_PURCHASED");
}

#[sqlx::test]
async fn after_redis_loses_everything_the_item_is_rebuilt_from_postgres(db: PgPool) {
    let redis = OwnRedis::start().await;
    let mut settings = test_settings(&db);
    use_own_redis(&mut settings, redis.url());
    let app = spawn_app_from(settings).await;
    let item = app.open_item(3).await;
    let mut tokens = Vec::new();
    for user in 51..=55 {
        tokens.push((user, app.token_for(user).await));
    }
    for (user, token) in &tokens[..2] {
        assert_eq!(
            app.post_seckill(token, item, &format!("10.24.0.{user}"))
                .await
                .status(),
            200
        );
    }

    let mut conn = app.redis().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();

    // Earlier buyers are remembered from Postgres; the one unit left sells once.
    let (user, token) = &tokens[0];
    let again = app
        .post_seckill(token, item, &format!("10.24.0.{user}"))
        .await;
    assert_eq!(json(again).await["code"], "ALREADY_PURCHASED");
    let mut statuses = Vec::new();
    for (user, token) in &tokens[2..] {
        statuses.push(
            app.post_seckill(token, item, &format!("10.24.0.{user}"))
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 409, 409]);
    assert_eq!(
        pg_orders(&db, item).await,
        3,
        "never more orders than stock"
    );
    let per_user: i64 = sqlx::query_scalar("SELECT count(*) FROM (SELECT user_id FROM orders GROUP BY user_id, item_id HAVING count(*) > 1) d")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(per_user, 0, "nobody holds two orders of one item");
    assert_eq!(
        redis_int(&app, "GET", &app.item_keys(item).stock()).await,
        Some(0)
    );
}

/// The drift repair's compare-and-set must not succeed after an ABA: between its read
/// and its write one purchase took a unit and another's failed commit gave one back, so
/// the counter reads the same while the reservations behind it changed.
#[tokio::test]
async fn the_drift_repair_refuses_after_the_stock_moved_and_came_back() {
    use seckill::domain::UserId;
    use seckill::sale::item::{Item, ItemId};
    use seckill::sale::stock::{
        KeyLifetime, PendingReservation, Rebuilds, Repairs, ReservationOptions, Reservations,
        StockRedis, Undo,
    };

    let settings = crate::helpers::redis_test_settings();
    let metrics = std::sync::Arc::new(seckill::metrics::Metrics::new().unwrap());
    let store =
        seckill::store::RedisStore::connect(&seckill::startup::redis_options(&settings), metrics)
            .await
            .unwrap();
    let minute = std::time::Duration::from_secs(60);
    let redis = StockRedis::new(store);
    let lifetime = KeyLifetime::new(minute);
    let options = ReservationOptions {
        pending: minute,
        replica_wait: std::time::Duration::ZERO,
    };
    let reservations = Reservations::new(redis.clone(), options);
    let repairs = Repairs::new(redis.clone(), lifetime);
    let now = chrono::Utc::now();
    let item = Item {
        id: ItemId::try_from(1).unwrap(),
        name: "aba".into(),
        price_cents: 1,
        total_stock: 10,
        remaining_stock: 10,
        starts_at: now - chrono::Duration::minutes(1),
        ends_at: now + chrono::Duration::hours(1),
        paused: false,
    };
    let ledger = seckill::sale::records::ItemLedger {
        remaining: 10,
        owed: Vec::new(),
        buyers: Vec::new(),
    };
    let rebuilds = Rebuilds::new(redis.clone(), lifetime);
    assert!(rebuilds.rebuild(&item, &ledger).await.unwrap());

    let snapshot = repairs.stock_snapshot(item.id).await.unwrap();
    assert_eq!(snapshot.stock, Some(10));
    // A: user 1 reserves; B: user 2 reserves and its commit fails, the unit comes back.
    let one = PendingReservation {
        user: UserId::try_from(1).unwrap(),
        order: uuid::Uuid::new_v4(),
    };
    let two = PendingReservation {
        user: UserId::try_from(2).unwrap(),
        order: uuid::Uuid::new_v4(),
    };
    reservations
        .reserve(&item, one.user, one.order)
        .await
        .unwrap();
    reservations
        .reserve(&item, two.user, two.order)
        .await
        .unwrap();
    assert!(reservations
        .undo(item.id, two, Undo::Release)
        .await
        .unwrap());
    reservations
        .undo(item.id, one, Undo::Release)
        .await
        .unwrap();
    assert_eq!(
        repairs.stock_snapshot(item.id).await.unwrap().stock,
        Some(10)
    );

    assert!(
        !repairs
            .repair_if_unmoved(item.id, &snapshot, 7, None)
            .await
            .unwrap(),
        "the counter moved since the snapshot: the repair waits for the next round"
    );
    assert_eq!(redis.remaining(&[item.id]).await.unwrap(), [Some(10)]);
    let fresh = repairs.stock_snapshot(item.id).await.unwrap();
    assert!(repairs
        .repair_if_unmoved(item.id, &fresh, 7, None)
        .await
        .unwrap());
    assert_eq!(redis.remaining(&[item.id]).await.unwrap(), [Some(7)]);
}

/// In this test's own database, orders of the `landing` users wait `seconds` at COMMIT
/// and then commit; orders of the `failing` users wait as long and then fail. A deferred
/// constraint trigger runs inside COMMIT, so the app has sent its COMMIT and hears
/// nothing meanwhile.
async fn slow_commits(db: &PgPool, seconds: f64, landing: &[i64], failing: &[i64]) {
    sqlx::raw_sql(&format!(
        r#"CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.user_id = ANY(ARRAY[{landing}, {failing}]::bigint[]) THEN
               PERFORM pg_sleep({seconds});
             END IF;
             IF NEW.user_id = ANY(ARRAY[{failing}]::bigint[]) THEN
               RAISE EXCEPTION 'refused at commit';
             END IF;
             RETURN NULL;
           END $$;
           CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON orders
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();"#,
        landing = ids(landing),
        failing = ids(failing),
    ))
    .execute(db)
    .await
    .unwrap();
}

/// `[1, 2]` → `1,2`; `[]` → `NULL` (a valid, matching-nothing array element).
fn ids(users: &[i64]) -> String {
    if users.is_empty() {
        return "NULL".into();
    }
    users
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[sqlx::test]
async fn a_commit_that_outlives_its_timeout_is_resolved_for_what_it_is(db: PgPool) {
    slow_commits(&db, 1.5, &[4201], &[4202]).await;
    let app = spawn_app_with(&db, |s| {
        s.order_commit_timeout_ms = 300;
        s.database_statement_timeout_ms = 3_000;
        s.database_idle_in_transaction_timeout_ms = 500;
        s.reservation_deadline_ms = 5_000;
        s.reconcile_interval_ms = 200;
    })
    .await;
    let (lands, fails) = (app.open_item(10).await, app.open_item(10).await);
    let (lander, failer) = (app.token_for(4201).await, app.token_for(4202).await);

    // One after the other, so that each COMMIT is its own batch's.
    let landed = app.post_seckill(&lander, lands, "10.25.0.1").await;
    let failed = app.post_seckill(&failer, fails, "10.25.0.2").await;
    // At the timeout both COMMITs are still running: nobody is told "failed".
    for response in [landed, failed] {
        assert_eq!(response.status(), 202);
        let body = json(response).await;
        assert_eq!(body["code"], "ORDER_PENDING", "{body}");
        assert!(body["orderId"].is_string(), "{body}");
    }

    for item in [lands, fails] {
        app.until_nothing_pending(
            item,
            "the reconciler resolves the pending reservation",
            Duration::from_secs(20),
        )
        .await;
    }
    for item in [lands, fails] {
        assert_eq!(
            redis_int(&app, "HLEN", &app.item_keys(item).in_doubt()).await,
            Some(0),
            "the in-doubt records are gone once resolved"
        );
    }
    // The order that committed stands everywhere; the one that failed left no trace.
    assert_eq!(
        (pg_orders(&db, lands).await, pg_remaining(&db, lands).await),
        (1, 9)
    );
    assert_eq!(
        (pg_orders(&db, fails).await, pg_remaining(&db, fails).await),
        (0, 10)
    );
    let mut conn = app.redis().await;
    for (item, stock, buyers, success) in [(lands, 9, vec!["4201"], 1), (fails, 10, vec![], 0)] {
        let members: Vec<String> = redis::cmd("SMEMBERS")
            .arg(app.item_keys(item).buyers())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            (
                redis_int(&app, "GET", &app.item_keys(item).stock()).await,
                members,
                redis_int(&app, "GET", &app.item_keys(item).success())
                    .await
                    .unwrap_or(0),
            ),
            (
                Some(stock),
                buyers.iter().map(|b| b.to_string()).collect(),
                success
            ),
            "item {item}: redis agrees with postgres"
        );
    }
}

#[sqlx::test]
async fn the_reconciler_repairs_buyers_and_the_success_counter_as_well_as_stock(db: PgPool) {
    let app = spawn_app_with(&db, fast_reconciler).await;
    let item = app.open_item(10).await;
    for user in [4301, 4302] {
        let token = app.token_for(user).await;
        assert_eq!(
            app.post_seckill(&token, item, "10.26.0.1").await.status(),
            200
        );
    }
    let mut conn = app.redis().await;
    let _: () = redis::pipe()
        .cmd("SREM")
        .arg(app.item_keys(item).buyers())
        .arg(4301)
        .ignore()
        .cmd("SADD")
        .arg(app.item_keys(item).buyers())
        .arg(999)
        .ignore()
        .cmd("SET")
        .arg(app.item_keys(item).success())
        .arg(7)
        .ignore()
        .cmd("SET")
        .arg(app.item_keys(item).stock())
        .arg(3)
        .ignore()
        .query_async(&mut conn)
        .await
        .unwrap();

    eventually(
        "stock, buyers and success counter agree with postgres again",
        Duration::from_secs(10),
        || {
            let mut conn = conn.clone();
            let app = &app;
            async move {
                let mut buyers: Vec<i64> = redis::cmd("SMEMBERS")
                    .arg(app.item_keys(item).buyers())
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                buyers.sort();
                let state = (
                    redis_int(app, "GET", &app.item_keys(item).stock()).await,
                    buyers,
                    redis_int(app, "GET", &app.item_keys(item).success()).await,
                );
                (state == (Some(8), vec![4301, 4302], Some(2))).then_some(())
            }
        },
    )
    .await;
}

#[sqlx::test]
async fn a_commit_whose_answer_is_lost_but_which_committed_is_a_success(db: PgPool) {
    let _failpoints = failpoint_lock().await;
    let app = spawn_app(&db).await;
    let item = app.open_item(5).await;
    let user = 4401;
    let token = app.token_for(user).await;

    fail::cfg("sale::commit_unanswered", &format!("return({user})")).unwrap();
    let response = app.post_seckill(&token, item, "10.27.0.1").await;
    fail::remove("sale::commit_unanswered");
    assert_eq!(response.status(), 200, "txid_status said committed");
    let body = json(response).await;
    let order: String = sqlx::query_scalar("SELECT id::text FROM orders WHERE user_id = $1")
        .bind(user)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(body["orderId"], order.as_str());
    // The reconciler runs every 10 s: within 2 s it can only be the committer's ZREM.
    app.until_nothing_pending(item, "settled by the committer", Duration::from_secs(2))
        .await;
    assert_eq!(
        (
            redis_int(&app, "GET", &app.item_keys(item).stock()).await,
            redis_int(&app, "GET", &app.item_keys(item).success()).await,
            pg_remaining(&db, item).await,
        ),
        (Some(4), Some(1), 4)
    );
}

/// Idempotency keys of this app in Redis.
async fn idempotency_keys(app: &TestApp) -> Vec<String> {
    let mut conn = app.redis().await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:*idempotency*", app.settings.redis_key_prefix))
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    keys
}

#[sqlx::test]
async fn answers_that_need_no_redis_claim_no_idempotency_key(db: PgPool) {
    let app = spawn_app(&db).await;
    let token = app.token_for(4601).await;
    let sold = app.open_item(1).await;
    let buyer = app.token_for(4602).await;
    assert_eq!(
        app.post_seckill(&buyer, sold, "10.28.0.9").await.status(),
        200
    );
    eventually(
        "the sale knows the item sold out",
        Duration::from_secs(10),
        || async { (app.metric_sum("seckill_sold_out_items").await == 1.0).then_some(()) },
    )
    .await;
    let calls = r#"seckill_redis_calls_total{purpose="idempotency"}"#;
    let before = app.metric_sum(calls).await;

    let keys: Vec<String> = (0..300).map(|n| format!("unknown-{n}")).collect();
    let unknown = futures_util::future::join_all(
        keys.iter()
            .map(|key| purchase_with_key(&app, &token, 999_999, key)),
    )
    .await;
    assert!(
        unknown.iter().all(|r| r.status() == 404),
        "every one is ITEM_NOT_FOUND"
    );
    for n in 0..20 {
        let response = purchase_with_key(&app, &token, sold, &format!("sold-{n}")).await;
        assert_eq!(json(response).await["code"], "SOLD_OUT");
    }

    assert_eq!(app.metric_sum(calls).await, before, "no idempotency call");
    assert_eq!(
        idempotency_keys(&app).await,
        Vec::<String>::new(),
        "no key made"
    );
}

#[sqlx::test]
async fn a_user_may_hold_four_purchases_in_flight_and_the_fifth_is_refused(db: PgPool) {
    let user = 4701;
    slow_commits(&db, 2.0, &[user], &[]).await;
    let app = spawn_app_with(&db, |s| {
        for rule in &mut s.limiter.policies.get_mut("seckill").unwrap().rules {
            rule.threshold = 1_000;
        }
    })
    .await;
    let token = app.token_for(user).await;
    let mut items = Vec::new();
    for _ in 0..7 {
        items.push(app.open_item(5).await);
    }

    let keys: Vec<String> = (0..6).map(|n| format!("in-flight-{n}")).collect();
    let answers = futures_util::future::join_all(
        items[..6]
            .iter()
            .zip(&keys)
            .map(|(item, key)| purchase_with_key(&app, &token, *item, key)),
    )
    .await;
    let mut codes = Vec::new();
    for answer in answers {
        let status = answer.status().as_u16();
        codes.push((
            status,
            json(answer).await["code"].as_str().map(String::from),
        ));
    }
    codes.sort();
    assert_eq!(
        codes,
        [
            (200, None),
            (200, None),
            (200, None),
            (200, None),
            (429, Some("TOO_MANY_PENDING".into())),
            (429, Some("TOO_MANY_PENDING".into())),
        ]
    );
    // Finished purchases free their places.
    assert_eq!(
        purchase_with_key(&app, &token, items[6], "after")
            .await
            .status(),
        200
    );
}

#[sqlx::test]
async fn a_purchase_whose_request_died_after_its_commit_is_answered_from_postgres(db: PgPool) {
    // Short enough that the claim goes stale soon, long enough that a loaded machine
    // still commits in time (300 ms failed the commit under a parallel chaos test).
    let app = spawn_app_with(&db, |s| s.order_commit_timeout_ms = 1_000).await;
    let item = app.open_item(5).await;
    let user = 4801;
    let token = app.token_for(user).await;

    fail::cfg("sale::hang_after_commit", &format!("return({user})")).unwrap();
    let gave_up = app
        .client
        .post(app.url("/seckill"))
        .bearer_auth(&token)
        .header("X-Forwarded-For", "10.29.0.1")
        .header("Idempotency-Key", "died")
        .json(&serde_json::json!({ "itemId": item }))
        .timeout(Duration::from_secs(3))
        .send()
        .await;
    fail::remove("sale::hang_after_commit");
    assert!(gave_up.is_err(), "the request never answered");
    let order: String = sqlx::query_scalar("SELECT id::text FROM orders WHERE user_id = $1")
        .bind(user)
        .fetch_one(&db)
        .await
        .unwrap();

    let claim = idempotency_keys(&app)
        .await
        .into_iter()
        .find(|k| k.ends_with(":died"))
        .expect("the claim exists");
    let ttl = redis_int(&app, "PTTL", &claim).await.unwrap();
    assert!(
        (1..=31_000).contains(&ttl),
        "a claim lives as long as a purchase can (deadline + commit timeout), not a day: {ttl} ms"
    );
    let (answer, _) = eventually(
        "the retry is answered from the order in postgres",
        Duration::from_secs(10),
        || async {
            let retry = purchase_with_key(&app, &token, item, "died").await;
            (retry.status() == 200).then_some(retry)
        },
    )
    .await;
    assert_eq!(json(answer).await["orderId"], order.as_str());
    let replay = purchase_with_key(&app, &token, item, "died").await;
    assert_eq!(replay.status(), 200);
    assert_eq!(replay.headers()["Idempotent-Replayed"], "true");
    assert_eq!(pg_orders(&db, item).await, 1);
}

/// `GET /api/orders/mine` as the shop page polls it.
async fn my_orders(app: &TestApp, token: &str, ip: &str) -> reqwest::Response {
    app.client
        .get(app.url("/api/orders/mine"))
        .bearer_auth(token)
        .header("X-Forwarded-For", ip)
        .send()
        .await
        .unwrap()
}

#[sqlx::test]
async fn a_flood_of_order_reads_never_starves_the_commits(db: PgPool) {
    // A small pool that a flood of reads would exhaust at once.
    let app = spawn_app_with(&db, |s| {
        s.database_max_connections = 1;
        s.database_acquire_timeout_ms = 50;
    })
    .await;
    // The reader has bought a lot before: each read returns 300 orders.
    sqlx::raw_sql(
        r#"INSERT INTO items (name, price_cents, total_stock, remaining_stock, starts_at, ends_at)
             SELECT 'past ' || g, 1, 1, 0, now() - interval '2 days', now() - interval '1 day'
             FROM generate_series(1, 300) g;
           INSERT INTO orders (id, user_id, item_id, state)
             SELECT gen_random_uuid(), 4901, id, 'paid' FROM items WHERE name LIKE 'past %';"#,
    )
    .execute(&db)
    .await
    .unwrap();
    let item = app.open_item(20).await;
    let reader = app.token_for(4901).await;
    let mut buyers = Vec::new();
    for user in 5001..=5020 {
        buyers.push((user, app.token_for(user).await));
    }

    let started = std::time::Instant::now();
    let reads = futures_util::future::join_all((0..100).map(|_| async {
        let mut statuses = Vec::new();
        for _ in 0..50 {
            statuses.push(
                my_orders(&app, &reader, "10.30.0.1")
                    .await
                    .status()
                    .as_u16(),
            );
        }
        statuses
    }));
    let app = &app;
    let purchases = futures_util::future::join_all(buyers.iter().map(|(user, token)| async move {
        let response = app
            .post_seckill(token, item, &format!("10.31.0.{}", user - 5000))
            .await;
        (
            response.status().as_u16(),
            json(response).await["code"].clone(),
        )
    }));
    let (reads, purchases) = tokio::join!(reads, purchases);

    assert_eq!(
        purchases
            .iter()
            .filter(|(status, _)| *status == 200)
            .count(),
        20,
        "every purchase made its order: {purchases:?}"
    );
    assert_eq!(pg_orders(&db, item).await, 20);
    let reads: Vec<u16> = reads.into_iter().flatten().collect();
    assert_eq!(reads.len(), 5_000);
    // The read policy (a bucket of 120, refilled by 2 a second) let only a few through.
    let reached_postgres = reads.iter().filter(|s| **s != 429).count() as u64;
    let most = 120 + 2 * started.elapsed().as_secs() + 2;
    assert!(
        reached_postgres <= most,
        "{reached_postgres} reads reached postgres"
    );
    assert_eq!(
        app.metric_sum("seckill_order_commit_pool_timeouts_total")
            .await,
        0.0
    );
}

#[sqlx::test]
async fn order_reads_have_a_limiter_policy_of_their_own(db: PgPool) {
    use seckill::limiter::policy::{Algorithm, KeySource, RuleConfig};
    let app = spawn_app_with(&db, |s| {
        let reads = s.limiter.policies.get_mut("orders_read").unwrap();
        reads.algorithm = Algorithm::SlidingWindow;
        reads.rules = vec![
            RuleConfig::new("user", KeySource::User, 3_600_000, 10, "Too many reads"),
            RuleConfig::new(
                "ip",
                KeySource::Ip,
                3_600_000,
                12,
                "Too many reads from here",
            ),
        ];
    })
    .await;
    let (first, second) = (app.token_for(4902).await, app.token_for(4903).await);
    let mut statuses = Vec::new();
    for _ in 0..15 {
        statuses.push(my_orders(&app, &first, "10.32.0.1").await.status().as_u16());
    }
    assert_eq!(statuses, [[200; 10].as_slice(), &[429; 5]].concat());
    let refused = my_orders(&app, &first, "10.32.0.1").await;
    assert!(refused.headers().contains_key("retry-after"));
    let body = json(refused).await;
    assert_eq!(
        (body["code"].as_str(), body["dimension"].as_str()),
        (Some("RATE_LIMITED"), Some("user"))
    );
    // The same address, another user: two more reads, then the address is full.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            my_orders(&app, &second, "10.32.0.1")
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429]);
}
