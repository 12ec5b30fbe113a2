//! Rate-limit policies edited through the admin API: in force on every instance,
//! audited, refused when invalid, and a fail mode changed while Redis is down.

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{
    eventually, json, spawn_app, spawn_app_from, spawn_app_with, use_own_redis, OwnRedis,
};

#[sqlx::test]
async fn a_rule_changed_through_one_instance_is_in_force_on_the_other(db: PgPool) {
    let first = spawn_app(&db).await;
    let second = spawn_app_from(first.settings.clone()).await;

    let changed = first
        .put_policy(
            "limited",
            json!({ "rules": [{ "name": "client", "threshold": 7 }] }),
        )
        .await;
    assert_eq!(changed.status(), 200);
    let changed_at = Instant::now();
    let body = json(changed).await;
    assert_eq!(body["rules"][0]["threshold"], 7);

    let lag = second
        .until_policy_served(r#""client";q=7;w=60, "ip";q=1000;w=60, "network";q=10000;w=60"#)
        .await;
    println!(
        "rule change in force on the other instance after {:?} (polled every 50 ms)",
        changed_at.elapsed().min(lag)
    );

    // ... and it holds there: the 8th request of one client is refused.
    for i in 0..8 {
        let response = second.limited("", "holder").await;
        assert_eq!(
            response.status(),
            if i < 7 { 200 } else { 429 },
            "request {i}"
        );
    }

    let audit = json(second.admin_get("/admin/api/audit?policy=limited").await).await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["changedBy"], "admin");
    assert_eq!(entries[0]["old"]["rules"][0]["threshold"], 100);
    assert_eq!(entries[0]["new"]["rules"][0]["threshold"], 7);
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM limiter_policy_audit WHERE policy = 'limited'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(rows, 1);
}

#[sqlx::test]
async fn invalid_rules_are_refused_and_change_nothing(db: PgPool) {
    let app = spawn_app(&db).await;
    let cases = [
        (
            json!({ "rules": [{ "name": "user", "windowMs": 0 }] }),
            "windowMs",
            "windowMs must be a whole number, 1 or more",
        ),
        (
            json!({ "rules": [{ "name": "user", "threshold": 0 }] }),
            "threshold",
            "threshold must be a whole number, 1 or more",
        ),
        (
            json!({ "rules": [{ "name": "user", "windowMs": -5 }] }),
            "rules[0].windowMs",
            "",
        ),
        (
            json!({ "rules": [{ "name": "nobody", "threshold": 2 }] }),
            "rules[0].name",
            "no rule",
        ),
        (
            json!({ "rules": [{ "name": "user", "message": "" }] }),
            "message",
            "message",
        ),
        (
            json!({ "algorithm": "moving_window", "rules": [] }),
            "algorithm",
            "",
        ),
    ];
    for (body, field, message) in cases {
        let response = app.put_policy("seckill", body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error = json(response).await;
        assert_eq!(error["code"], "VALIDATION_FAILED", "{body}");
        assert_eq!(error["field"], field, "{body}");
        assert!(
            error["message"].as_str().unwrap().contains(message),
            "{error}"
        );
    }
    assert_eq!(
        app.put_policy("no_such_policy", json!({ "rules": [] }))
            .await
            .status(),
        404
    );

    let seckill = app.listed_policy("seckill").await;
    assert_eq!(
        seckill["rules"][1],
        json!({
            "name": "user", "key": "user", "windowMs": 60000, "threshold": 3, "message": "No duplicate submissions",
            "shadow": false, "maxDelayMs": 1000
        })
    );
    let audited: i64 = sqlx::query_scalar("SELECT count(*) FROM limiter_policy_audit")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(audited, 0);
}

/// A fail mode is an operator's edit like any other, and one made while Redis is down
/// reaches every instance during the outage (the watcher rereads Postgres on a timer
/// when Redis cannot give it the rules' version).
#[sqlx::test]
async fn a_fail_mode_changed_during_an_outage_applies_on_every_instance(db: PgPool) {
    let mut redis = OwnRedis::start().await;
    let url = redis.url();
    let one = spawn_app_with(&db, |s| use_own_redis(s, url)).await;
    let two = spawn_app_from(one.settings.clone()).await;
    redis.stop();
    assert_eq!(
        two.limited("", "fail-mode-test").await.status(),
        200,
        "`limited` fails open by default"
    );
    let closed = one
        .put_policy("limited", json!({ "failMode": "closed", "rules": [] }))
        .await;
    assert_eq!(closed.status(), 200);
    assert_eq!(json(closed).await["failMode"], "closed");
    eventually(
        "the other instance fails closed",
        Duration::from_secs(10),
        || async { (two.limited("", "fail-mode-test").await.status() == 503).then_some(()) },
    )
    .await;
    let audit = json(one.admin_get("/admin/api/audit?policy=limited").await).await;
    assert_eq!(audit["entries"][0]["new"]["failMode"], "closed", "{audit}");
}
