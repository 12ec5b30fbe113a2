//! The denial cache over HTTP: a refusal Redis made is answered again locally, with the
//! same dimension and message, until it expires; a real rule change retires it on every
//! instance.

use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{json, spawn_app, spawn_app_from, TestApp};

const LIMITER_CALLS: &str = r#"seckill_redis_calls_total{purpose="limiter"}"#;
const LOCAL_REFUSALS: &str = "seckill_limiter_local_refusals_total";

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
        .to_string()
}

#[sqlx::test]
async fn a_refused_users_next_requests_are_refused_without_asking_redis(db: PgPool) {
    let app = spawn_app(&db).await;
    let item = app.open_item(10).await;
    let token = app.token_for(42).await;
    // A fresh IP each time: only the user dimension (3 per minute) can refuse.
    let statuses = [
        app.post_seckill(&token, item, "10.9.0.1").await.status(),
        app.post_seckill(&token, item, "10.9.0.2").await.status(),
        app.post_seckill(&token, item, "10.9.0.3").await.status(),
    ];
    assert_eq!(statuses.map(|s| s.as_u16()), [200, 409, 409]);

    let calls = app.metric_sum(LIMITER_CALLS).await;
    assert_eq!(calls, 3.0, "every answer so far came from Redis");
    assert_eq!(app.metric_sum(LOCAL_REFUSALS).await, 0.0);

    // The third admission took the user's last slot: from now on the user is refused
    // locally, until that slot opens (60 s after the first purchase).
    let first = app.post_seckill(&token, item, "10.9.0.4").await;
    assert_eq!(first.status(), 429);
    let first_wait: u64 = header(&first, "retry-after-ms").parse().unwrap();
    assert!(
        (59_000..=60_000).contains(&first_wait),
        "the slot of the first purchase opens within a minute: {first_wait}"
    );
    let first_body = json(first).await;
    assert_eq!(first_body["dimension"], "user");
    assert_eq!(first_body["message"], "No duplicate submissions");

    for i in 0..5 {
        let response = app.post_seckill(&token, item, &format!("10.9.1.{i}")).await;
        assert_eq!(response.status(), 429, "request {i}");
        let wait: u64 = header(&response, "retry-after-ms").parse().unwrap();
        assert!(
            (1..=first_wait).contains(&wait),
            "a local wait ({wait} ms) is never later than Redis's ({first_wait} ms)"
        );
        assert_eq!(header(&response, "x-ratelimit-remaining"), "0");
        assert!(header(&response, "ratelimit").starts_with(r#""user";r=0;t="#));
        let body = json(response).await;
        assert_eq!(body["code"], "RATE_LIMITED");
        assert_eq!(body["dimension"], first_body["dimension"]);
        assert_eq!(body["message"], first_body["message"]);
    }
    assert_eq!(
        app.metric_sum(LIMITER_CALLS).await,
        calls,
        "no limiter call for a locally refused user"
    );
    assert_eq!(
        app.metric_sum(
            r#"seckill_limiter_local_refusals_total{dimension="user",policy="seckill"}"#
        )
        .await,
        6.0
    );
    assert_eq!(
        app.metric_sum(
            r#"seckill_limiter_decisions_total{dimension="user",outcome="reject",policy="seckill"}"#
        )
        .await,
        6.0,
        "local refusals are refusals too"
    );
    // Someone else is not affected.
    let other = app.token_for(43).await;
    assert_eq!(
        app.post_seckill(&other, item, "10.9.2.1").await.status(),
        200
    );
}

async fn set_limited_threshold(app: &TestApp, threshold: u64) {
    let edit = json!({ "rules": [{ "name": "client", "threshold": threshold }] });
    let response = app.put_policy("limited", edit).await;
    assert_eq!(response.status(), 200);
}

#[sqlx::test]
async fn a_rule_raised_elsewhere_sends_a_locally_refused_key_back_to_redis(db: PgPool) {
    let first = spawn_app(&db).await;
    let second = spawn_app_from(first.settings.clone()).await;
    set_limited_threshold(&first, 2).await;
    second
        .until_policy_served(r#""client";q=2;w=60, "ip";q=1000;w=60, "network";q=10000;w=60"#)
        .await;

    assert_eq!(second.limited("", "holder").await.status(), 200);
    assert_eq!(second.limited("", "holder").await.status(), 200);
    assert_eq!(second.limited("", "holder").await.status(), 429);
    let calls = second.metric_sum(LIMITER_CALLS).await;
    assert_eq!(second.limited("", "holder").await.status(), 429);
    assert_eq!(
        second.metric_sum(LIMITER_CALLS).await,
        calls,
        "refused locally"
    );

    set_limited_threshold(&first, 5).await;
    second
        .until_policy_served(r#""client";q=5;w=60, "ip";q=1000;w=60, "network";q=10000;w=60"#)
        .await;
    let calls = second.metric_sum(LIMITER_CALLS).await;
    let response = second.limited("", "holder").await;
    assert_eq!(
        second.metric_sum(LIMITER_CALLS).await,
        calls + 1.0,
        "the old denial no longer counts: Redis decides"
    );
    assert_eq!(response.status(), 200, "2 of 5 used: admitted");
}
