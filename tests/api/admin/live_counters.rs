//! The dashboard's live counters, summed over every instance.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{eventually, json, spawn_app, spawn_app_from};

#[sqlx::test]
async fn live_counters_sum_every_instance(db: PgPool) {
    let first = spawn_app(&db).await;
    let second = spawn_app_from(first.settings.clone()).await;
    let item = first.open_item(10).await;
    second.until_items_listed(1).await;
    for (app, user) in [(&first, 91), (&second, 92), (&second, 93)] {
        let token = app.token_for(user).await;
        assert_eq!(
            app.post_seckill(&token, item, &format!("10.52.0.{user}"))
                .await
                .status(),
            200
        );
    }
    let (stats, _) = eventually(
        "both instances flushed their counts",
        Duration::from_secs(10),
        || async {
            let stats = json(first.admin_get("/admin/api/stats?window=300").await).await;
            (stats["orders"] == 3).then_some(stats)
        },
    )
    .await;
    assert_eq!(stats["passes"]["user"], 3);
    assert_eq!(stats["rejections"]["user"], json!(null));
    assert_eq!(stats["items"][0]["remainingStock"], 7);
}
