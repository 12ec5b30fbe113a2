//! `GET /admin/api/history/samples`: the sampled refusals, folded into Postgres, read back
//! whole through the admin API, their only reader (docs/history.md).

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

use seckill_test_support::{eventually, json, spawn_app_with};

#[sqlx::test]
async fn at_one_in_one_the_samples_are_the_refused_purchases_with_user_address_and_rule(
    db: PgPool,
) {
    let app = spawn_app_with(&db, |s| {
        s.history.sample_every = 1;
        s.history.fold_every_ms = 50;
    })
    .await;
    let item = app.open_item(100).await;
    // User 7, five purchases from one address: the user rule (3 a minute) refuses two.
    let token = app.token_for(7).await;
    let mut refused = 0;
    for _ in 0..5 {
        let response = app.post_seckill(&token, item, "10.93.0.7").await;
        if response.status() == 429 {
            refused += 1;
        }
    }
    assert_eq!(refused, 2);

    let path = format!("/admin/api/history/samples?item={item}");
    let (body, _) = eventually("the samples folded", Duration::from_secs(10), || {
        let response = app.admin_get(&path);
        async move {
            let body = json(response.await).await;
            (body["samples"].as_array().map(Vec::len) == Some(2)).then_some(body)
        }
    })
    .await;
    assert_eq!(body["truncated"], false);
    for sample in body["samples"].as_array().into_iter().flatten() {
        assert_eq!(sample["policy"], "seckill");
        assert_eq!(sample["rule"], "user");
        assert_eq!(sample["user"], 7);
        assert_eq!(sample["ip"], "10.93.0.7");
        assert_eq!(sample["item"], item);
    }
    // Another item has none; a bad range is refused with its field; no token, no data.
    let other = app
        .admin_get(&format!("/admin/api/history/samples?item={}", item + 1))
        .await;
    assert_eq!(json(other).await["samples"], Value::Array(vec![]));
    let backwards = app
        .admin_get("/admin/api/history/samples?from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z")
        .await;
    assert_eq!(backwards.status(), 400);
    assert_eq!(json(backwards).await["field"], "to");
    let anonymous = reqwest::get(format!("{}/admin/api/history/samples", app.address))
        .await
        .expect("a response");
    assert_eq!(anonymous.status(), 401);
}
