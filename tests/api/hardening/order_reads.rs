//! A flood of order reads: its own limiter policy, and never a starved commit.

use sqlx::PgPool;

use seckill_test_support::{json, pg_orders, spawn_app_with};

#[sqlx::test]
async fn a_flood_of_order_reads_never_starves_the_commits(db: PgPool) {
    // A small pool that a flood of reads would exhaust at once.
    let app = spawn_app_with(&db, |s| {
        s.database_max_connections = 1;
        s.database_acquire_timeout_ms = 50;
    })
    .await;
    // The reader has bought a lot before: each read returns 300 orders.
    sqlx::raw_sql(
        r#"INSERT INTO items (name, price_cents, total_stock, remaining_stock, starts_at, ends_at)
             SELECT 'past ' || g, 1, 1, 0, now() - interval '2 days', now() - interval '1 day'
             FROM generate_series(1, 300) g;
           INSERT INTO orders (id, user_id, item_id, state)
             SELECT gen_random_uuid(), 4901, id, 'paid' FROM items WHERE name LIKE 'past %';"#,
    )
    .execute(&db)
    .await
    .unwrap();
    let item = app.open_item(20).await;
    let reader = app.token_for(4901).await;
    let buyers = app.tokens(5001..=5020).await;

    let started = std::time::Instant::now();
    let reads = futures_util::future::join_all((0..100).map(|_| async {
        let mut statuses = Vec::new();
        for _ in 0..50 {
            statuses.push(
                app.my_orders(&reader, Some("10.30.0.1"))
                    .await
                    .status()
                    .as_u16(),
            );
        }
        statuses
    }));
    let app = &app;
    let purchases = futures_util::future::join_all(buyers.iter().map(|(user, token)| async move {
        let response = app
            .post_seckill(token, item, &format!("10.31.0.{}", user - 5000))
            .await;
        (
            response.status().as_u16(),
            json(response).await["code"].clone(),
        )
    }));
    let (reads, purchases) = tokio::join!(reads, purchases);

    assert_eq!(
        purchases
            .iter()
            .filter(|(status, _)| *status == 200)
            .count(),
        20,
        "every purchase made its order: {purchases:?}"
    );
    assert_eq!(pg_orders(&db, item).await, 20);
    let reads: Vec<u16> = reads.into_iter().flatten().collect();
    assert_eq!(reads.len(), 5_000);
    // The read policy (a bucket of 120, refilled by 2 a second) let only a few through.
    let reached_postgres = reads.iter().filter(|s| **s != 429).count() as u64;
    let most = 120 + 2 * started.elapsed().as_secs() + 2;
    assert!(
        reached_postgres <= most,
        "{reached_postgres} reads reached postgres"
    );
    assert_eq!(
        app.metric_sum("seckill_order_commit_pool_timeouts_total")
            .await,
        0.0
    );
}

#[sqlx::test]
async fn order_reads_have_a_limiter_policy_of_their_own(db: PgPool) {
    use seckill::limiter::policy::{Algorithm, KeySource, RuleConfig};
    let app = spawn_app_with(&db, |s| {
        let reads = s.limiter.policies.get_mut("orders_read").unwrap();
        reads.algorithm = Algorithm::SlidingWindow;
        reads.rules = vec![
            RuleConfig::new("user", KeySource::User, 3_600_000, 10, "Too many reads"),
            RuleConfig::new(
                "ip",
                KeySource::Ip,
                3_600_000,
                12,
                "Too many reads from here",
            ),
        ];
    })
    .await;
    let (first, second) = (app.token_for(4902).await, app.token_for(4903).await);
    let mut statuses = Vec::new();
    for _ in 0..15 {
        statuses.push(
            app.my_orders(&first, Some("10.32.0.1"))
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [[200; 10].as_slice(), &[429; 5]].concat());
    let refused = app.my_orders(&first, Some("10.32.0.1")).await;
    assert!(refused.headers().contains_key("retry-after"));
    let body = json(refused).await;
    assert_eq!(
        (body["code"].as_str(), body["dimension"].as_str()),
        (Some("RATE_LIMITED"), Some("user"))
    );
    // The same address, another user: two more reads, then the address is full.
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            app.my_orders(&second, Some("10.32.0.1"))
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429]);
}
