//! Idempotency keys abused: one key sent twenty times at once, a refusal retried with
//! its key, keys that answers needing no Redis must not claim, and the retry of a
//! request that died after its commit.

use std::time::Duration;

use sqlx::PgPool;

use super::purchase_with_key;
use seckill_test_support::{eventually, json, pg_orders, spawn_app, spawn_app_with, TestApp};

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
    let ttl = app
        .redis_command::<Option<i64>>("PTTL", &claim)
        .await
        .unwrap();
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

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

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
}
