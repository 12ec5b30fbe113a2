//! Stampedes on purchases: a thousand requests for a sold-out item answered from memory
//! by every instance, and one user's purchases in flight capped.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::PgPool;

use super::{purchase_with_key, slow_commits};
use seckill_test_support::{eventually, json, spawn_app_from, spawn_app_with};

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

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

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
}
