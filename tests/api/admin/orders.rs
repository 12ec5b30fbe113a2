//! The operators' order search: paged, filtered, newest first, and bounded.

use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{json, spawn_app};

#[sqlx::test]
async fn orders_can_be_paged_and_filtered_newest_first(db: PgPool) {
    let app = spawn_app(&db).await;
    let (a, b) = (app.open_item(5).await, app.open_item(5).await);
    let mut placed = Vec::new();
    for (user, item) in [(81, a), (82, a), (81, b)] {
        let token = app.token_for(user).await;
        let order = json(
            app.post_seckill(&token, item, &format!("10.51.0.{user}"))
                .await,
        )
        .await;
        placed.push(order["orderId"].as_str().unwrap().to_string());
    }

    let all = json(app.admin_get("/admin/api/orders").await).await;
    assert_eq!(all["total"], 3);
    let ids: Vec<&str> = all["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["orderId"].as_str().unwrap())
        .collect();
    let newest_first: Vec<&str> = placed.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first);

    assert_eq!(
        json(app.admin_get(&format!("/admin/api/orders?item={a}")).await).await["total"],
        2
    );
    assert_eq!(
        json(app.admin_get("/admin/api/orders?user=81").await).await["total"],
        2
    );
    let page = json(app.admin_get("/admin/api/orders?perPage=1&page=2").await).await;
    assert_eq!(
        (
            page["total"].as_i64(),
            page["orders"].as_array().unwrap().len()
        ),
        (Some(3), 1)
    );
    assert_eq!(page["orders"][0]["orderId"], placed[1].as_str());
    let future = json(
        app.admin_get("/admin/api/orders?from=2999-01-01T00:00:00Z")
            .await,
    )
    .await;
    assert_eq!(future["total"], 0);

    let bad = app.admin_get("/admin/api/orders?perPage=1000").await;
    assert_eq!(bad.status(), 400);
    assert_eq!(json(bad).await["field"], "perPage");
    assert_eq!(
        app.admin_get("/admin/api/orders?from=yesterday")
            .await
            .status(),
        400
    );
}

#[sqlx::test]
async fn order_paging_beyond_any_offset_is_a_validation_error(db: PgPool) {
    let app = spawn_app(&db).await;
    for (query, field) in [
        ("page=9223372036854775807", "page"),
        ("page=4611686018427387904&perPage=200", "page"),
        ("page=0", "page"),
        ("perPage=201", "perPage"),
    ] {
        let response = app.admin_get(&format!("/admin/api/orders?{query}")).await;
        assert_eq!(response.status(), 400, "{query}");
        let body = json(response).await;
        assert_eq!(body["code"], "VALIDATION_FAILED", "{query}");
        assert_eq!(body["field"], field, "{query}");
    }
    let last_allowed = app
        .admin_get("/admin/api/orders?page=100000&perPage=200")
        .await;
    assert_eq!(last_allowed.status(), 200);
    assert_eq!(json(last_allowed).await["orders"], json!([]));
}
