//! `GET /admin/api/stats/series`: the dashboard's charts, one point per second summed
//! over every instance, each purchase counted once under its outcome and in its second.

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;

use seckill_test_support::{eventually, json, spawn_app, spawn_app_from, TestApp};

async fn series(app: &TestApp, query: &str) -> Value {
    let response = app
        .admin_get(&format!("/admin/api/stats/series{query}"))
        .await;
    assert_eq!(response.status(), 200);
    json(response).await
}

fn sum(points: &Value) -> i64 {
    points
        .as_array()
        .expect("an array of points")
        .iter()
        .map(|p| p.as_i64().expect("a count"))
        .sum()
}

/// The seconds (unix) whose point is not 0.
fn busy_seconds(body: &Value, points: &Value) -> Vec<i64> {
    let from = body["from"].as_i64().unwrap();
    (0..)
        .zip(points.as_array().unwrap())
        .filter(|(_, p)| p.as_i64() != Some(0))
        .map(|(i, _)| from + i)
        .collect()
}

/// The last sample of an item's stock.
fn last_stock(body: &Value, item: i64) -> Option<i64> {
    body["stock"][item.to_string()]
        .as_array()?
        .iter()
        .rev()
        .find_map(Value::as_i64)
}

async fn buy(app: &TestApp, user: i64, item: i64, ip: &str) -> (u16, Value) {
    let token = app.token_for(user).await;
    let response = app.post_seckill(&token, item, ip).await;
    (response.status().as_u16(), json(response).await)
}

#[sqlx::test]
async fn the_window_is_clamped_to_one_to_three_hundred_seconds(db: PgPool) {
    let app = spawn_app(&db).await;
    for (query, points) in [
        ("", 300),
        ("?window=1", 1),
        ("?window=0", 1),
        ("?window=86400", 300),
    ] {
        let body = series(&app, query).await;
        assert_eq!(body["windowSeconds"], points, "{query}");
        assert_eq!(
            body["purchases"]["created"].as_array().unwrap().len(),
            points,
            "{query}"
        );
        // The sale's dimensions are charted before anything was refused.
        for dimension in ["api", "user", "ip"] {
            assert_eq!(sum(&body["purchases"]["rejected"][dimension]), 0, "{query}");
        }
    }
    let refused = app
        .client
        .get(app.url("/admin/api/stats/series"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
}

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

    #[sqlx::test]
    async fn every_purchase_is_one_point_under_its_outcome_summed_over_instances(db: PgPool) {
        let a = spawn_app(&db).await;
        let b = spawn_app_from(a.settings.clone()).await;
        let scarce = a.open_item(2).await;
        let plenty = a.open_item(100).await;
        b.until_items_listed(2).await;
        let started = chrono::Utc::now().timestamp();

        // A fresh address per request: only the user dimension (3 a minute) ever refuses.
        let mut answers = Vec::new();
        for (app, user, item, ip) in [
            (&a, 201, scarce, "10.61.0.1"),
            (&b, 202, scarce, "10.61.0.2"),
            (&a, 203, scarce, "10.61.0.3"),
            (&b, 204, scarce, "10.61.0.4"),
            (&a, 205, plenty, "10.61.0.5"),
            (&a, 205, plenty, "10.61.0.6"),
            (&a, 205, plenty, "10.61.0.7"),
            // B has not seen user 205's quota run out: Redis refuses.
            (&b, 205, plenty, "10.61.0.8"),
            // A took the last slot itself, so its denial cache answers.
            (&a, 205, plenty, "10.61.0.9"),
        ] {
            let (status, body) = buy(app, user, item, ip).await;
            answers.push((status, body["code"].as_str().unwrap_or("").to_string()));
        }
        let codes: Vec<(u16, &str)> = answers.iter().map(|(s, c)| (*s, c.as_str())).collect();
        assert_eq!(
            codes,
            [
                (200, ""),
                (200, ""),
                (409, "SOLD_OUT"),
                (409, "SOLD_OUT"),
                (200, ""),
                (409, "ALREADY_PURCHASED"),
                (409, "ALREADY_PURCHASED"),
                (429, "RATE_LIMITED"),
                (429, "RATE_LIMITED"),
            ]
        );
        let ended = chrono::Utc::now().timestamp();

        let (body, _) = eventually(
            "both instances flushed every outcome and sampled the stock",
            Duration::from_secs(10),
            || async {
                let body = series(&a, "?window=300").await;
                let purchases = &body["purchases"];
                let settled = sum(&purchases["created"]) == 3
                    && sum(&purchases["soldOut"]) == 2
                    && sum(&purchases["other"]) == 2
                    && sum(&purchases["rejected"]["user"]) == 2
                    && last_stock(&body, scarce) == Some(0)
                    && last_stock(&body, plenty) == Some(99);
                settled.then_some(body)
            },
        )
        .await;
        let purchases = &body["purchases"];
        assert_eq!(sum(&purchases["errors"]), 0);
        assert_eq!(sum(&purchases["rejected"]["ip"]), 0);
        assert_eq!(sum(&purchases["rejected"]["api"]), 0);
        assert_eq!(sum(&body["refusals"]["local"]), 1);
        assert_eq!(sum(&body["refusals"]["redis"]), 1);

        // One point per second for the window, ending with the last whole second; each
        // purchase in a second of the burst (a flush lands within a second of it).
        assert_eq!(body["windowSeconds"], 300);
        let from = body["from"].as_i64().unwrap();
        let now = chrono::Utc::now().timestamp();
        assert!(
            (now - 301..=now - 300).contains(&from),
            "from {from}, now {now}"
        );
        for points in [
            &purchases["created"],
            &purchases["soldOut"],
            &body["refusals"]["redis"],
        ] {
            assert_eq!(points.as_array().unwrap().len(), 300);
            for second in busy_seconds(&body, points) {
                assert!(
                    (started..=ended + 2).contains(&second),
                    "a point at {second}, the burst ran {started}..={ended}"
                );
            }
        }
        assert_eq!(
            body["stock"][scarce.to_string()].as_array().unwrap().len(),
            300
        );

        // The other instance reads the same sums: they are Redis's, not its own.
        let other = series(&b, "?window=300").await;
        assert_eq!(sum(&other["purchases"]["created"]), 3);
    }
}
