//! Pausing a sale and resuming it.

use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{json, spawn_app};

#[sqlx::test]
async fn a_paused_sale_answers_sale_paused_until_resumed(db: PgPool) {
    let app = spawn_app(&db).await;
    let item = app.open_item(5).await;
    let token = app.token_for(71).await;

    let paused = app
        .admin_send(
            reqwest::Method::POST,
            &format!("/admin/api/items/{item}/pause"),
            Some(json!({})),
        )
        .await;
    assert_eq!(paused.status(), 200);
    assert_eq!(json(paused).await["paused"], true);
    let listing = json(app.get("/api/items").await).await;
    assert_eq!(listing["items"][0]["paused"], true);
    let refused = app.post_seckill(&token, item, "10.50.0.1").await;
    assert_eq!(refused.status(), 409);
    assert_eq!(json(refused).await["code"], "SALE_PAUSED");

    let resumed = app
        .admin_send(
            reqwest::Method::POST,
            &format!("/admin/api/items/{item}/resume"),
            Some(json!({})),
        )
        .await;
    assert_eq!(json(resumed).await["paused"], false);
    assert_eq!(
        app.post_seckill(&token, item, "10.50.0.1").await.status(),
        200
    );

    let missing = app
        .admin_send(
            reqwest::Method::POST,
            "/admin/api/items/999999/pause",
            Some(json!({})),
        )
        .await;
    assert_eq!(json(missing).await["code"], "ITEM_NOT_FOUND");
}
