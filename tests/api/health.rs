use std::time::Duration;

use sqlx::PgPool;

use seckill_test_support::{
    eventually, json, spawn_app, spawn_app_with, use_own_redis, OwnRedis, TestApp,
};

/// Polls readiness until it reports exactly `store` down; liveness must not care.
async fn wait_until_not_ready(app: &TestApp, store: &str) {
    let (body, took) = eventually(
        "readiness reports the store down",
        Duration::from_secs(10),
        || async {
            let response = app.get("/health/ready").await;
            (response.status() == 503).then_some(())?;
            Some(json(response).await)
        },
    )
    .await;
    println!("readiness noticed {store} down after {took:?}");
    assert_eq!(body["code"], "NOT_READY");
    assert_eq!(body["down"], serde_json::json!([store]));
    assert_eq!(
        app.get("/health/live").await.status(),
        200,
        "liveness does not depend on {store}"
    );
}

async fn wait_until_ready(app: &TestApp, store: &str) {
    let (_, took) = eventually("readiness recovers", Duration::from_secs(10), || async {
        (app.get("/health/ready").await.status() == 200).then_some(())
    })
    .await;
    println!("readiness recovered from {store} after {took:?}");
}

#[sqlx::test]
async fn liveness_and_readiness_answer_when_both_stores_are_up(db: PgPool) {
    let app = spawn_app(&db).await;

    let live = app.get("/health/live").await;
    assert_eq!(live.status(), 200);

    let ready = app.get("/health/ready").await;
    assert_eq!(ready.status(), 200);
    assert_eq!(json(ready).await, serde_json::json!({ "status": "ready" }));
}

#[sqlx::test]
async fn readiness_follows_redis_down_and_back_without_a_restart(db: PgPool) {
    let mut redis = OwnRedis::start().await;
    let url = redis.url();
    let app = spawn_app_with(&db, |s| use_own_redis(s, url)).await;
    assert_eq!(app.get("/health/ready").await.status(), 200);

    redis.stop();
    wait_until_not_ready(&app, "redis").await;
    redis.restart().await;
    wait_until_ready(&app, "redis").await;
}

#[sqlx::test]
async fn readiness_follows_postgres_down_and_back_without_a_restart(db: PgPool) {
    let app = spawn_app(&db).await;
    assert_eq!(app.get("/health/ready").await.status(), 200);

    app.take_postgres_away().await;
    wait_until_not_ready(&app, "postgres").await;
    app.bring_postgres_back().await;
    wait_until_ready(&app, "postgres").await;
}

/// A read that needs a store that cannot be reached answers 503 `STORE_UNAVAILABLE`
/// with `Retry-After`, not 500 `INTERNAL`: the client did nothing wrong and may retry
/// (the soak saw 500s from `/api/orders/mine` and the admin reads while Postgres
/// refused connections, and from `/admin/api/stats` while Redis was down), and a
/// purchase whose `Idempotency-Key` cannot be claimed says so.
#[sqlx::test]
async fn reads_answer_503_while_a_store_cannot_be_reached(db: PgPool) {
    let mut redis = OwnRedis::start().await;
    let url = redis.url();
    let app = spawn_app_with(&db, |s| use_own_redis(s, url)).await;
    let token = app.token_for(41).await;
    let item = app.open_item(3).await;
    assert_eq!(app.my_orders(&token, None).await.status(), 200);

    app.take_postgres_away().await;
    let orders = app.my_orders(&token, None).await;
    for response in [orders, app.admin_get("/admin/api/items").await] {
        assert_eq!(response.status(), 503);
        assert_eq!(
            response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap()),
            Some("1")
        );
        assert_eq!(json(response).await["code"], "STORE_UNAVAILABLE");
    }
    app.bring_postgres_back().await;

    redis.stop();
    let stats = app.admin_get("/admin/api/stats").await;
    assert_eq!(stats.status(), 503);
    assert_eq!(json(stats).await["code"], "STORE_UNAVAILABLE");
    // A purchase's `Idempotency-Key` is claimed in Redis first: no order was tried, so
    // not `ORDER_FAILED`.
    let key = Some("health-store-unavailable");
    let keyed = app
        .post_seckill_with(&token, item, "127.0.0.1", None, key)
        .await;
    assert_eq!(keyed.status(), 503);
    assert_eq!(json(keyed).await["code"], "STORE_UNAVAILABLE");
}
