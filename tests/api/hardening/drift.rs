//! Redis drifting from Postgres and brought back: rebuilt after it lost everything, its
//! counters repaired by the reconciler, and the repair's race with live purchases.

use std::time::Duration;

use sqlx::PgPool;

use super::fast_reconciler;
use seckill_test_support::{
    eventually, json, pg_orders, spawn_app_from, spawn_app_with, test_settings, use_own_redis,
    OwnRedis,
};

#[sqlx::test]
async fn after_redis_loses_everything_the_item_is_rebuilt_from_postgres(db: PgPool) {
    let redis = OwnRedis::start().await;
    let mut settings = test_settings(&db);
    use_own_redis(&mut settings, redis.url());
    let app = spawn_app_from(settings).await;
    let item = app.open_item(3).await;
    let tokens = app.tokens(51..=55).await;
    for (user, token) in &tokens[..2] {
        assert_eq!(
            app.post_seckill(token, item, &format!("10.24.0.{user}"))
                .await
                .status(),
            200
        );
    }

    let mut conn = app.redis().await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();

    // Earlier buyers are remembered from Postgres; the one unit left sells once.
    let (user, token) = &tokens[0];
    let again = app
        .post_seckill(token, item, &format!("10.24.0.{user}"))
        .await;
    assert_eq!(json(again).await["code"], "ALREADY_PURCHASED");
    let mut statuses = Vec::new();
    for (user, token) in &tokens[2..] {
        statuses.push(
            app.post_seckill(token, item, &format!("10.24.0.{user}"))
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 409, 409]);
    assert_eq!(
        pg_orders(&db, item).await,
        3,
        "never more orders than stock"
    );
    let per_user: i64 = sqlx::query_scalar("SELECT count(*) FROM (SELECT user_id FROM orders GROUP BY user_id, item_id HAVING count(*) > 1) d")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(per_user, 0, "nobody holds two orders of one item");
    assert_eq!(
        app.redis_command::<Option<i64>>("GET", &app.item_keys(item).stock())
            .await,
        Some(0)
    );
}

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

    /// The drift repair's compare-and-set must not succeed after an ABA: between its read
    /// and its write one purchase took a unit and another's failed commit gave one back, so
    /// the counter reads the same while the reservations behind it changed.
    #[tokio::test]
    async fn the_drift_repair_refuses_after_the_stock_moved_and_came_back() {
        use seckill::domain::UserId;
        use seckill::sale::item::{Item, ItemId};
        use seckill::sale::stock::{
            KeyLifetime, PendingReservation, Rebuilds, Repairs, ReservationOptions, Reservations,
            StockRedis, Undo,
        };

        let settings = seckill_test_support::redis_test_settings();
        let metrics = std::sync::Arc::new(seckill::metrics::Metrics::new().unwrap());
        let store = seckill::store::RedisStore::connect(
            &seckill::startup::redis_options(&settings),
            metrics,
        )
        .await
        .unwrap();
        let minute = std::time::Duration::from_secs(60);
        let redis = StockRedis::new(store);
        let lifetime = KeyLifetime::new(minute);
        let options = ReservationOptions {
            pending: minute,
            replica_wait: std::time::Duration::ZERO,
        };
        let reservations = Reservations::new(redis.clone(), options);
        let repairs = Repairs::new(redis.clone(), lifetime);
        let now = chrono::Utc::now();
        let item = Item {
            id: ItemId::try_from(1).unwrap(),
            name: "aba".into(),
            price_cents: 1,
            total_stock: 10,
            remaining_stock: 10,
            starts_at: now - chrono::Duration::minutes(1),
            ends_at: now + chrono::Duration::hours(1),
            paused: false,
            archived_at: None,
        };
        let ledger = seckill::sale::records::ItemLedger {
            remaining: 10,
            owed: Vec::new(),
            buyers: Vec::new(),
            room: Default::default(),
        };
        let rebuilds = Rebuilds::new(redis.clone(), lifetime);
        assert!(rebuilds.rebuild(&item, &ledger).await.unwrap());

        let snapshot = repairs.stock_snapshot(item.id).await.unwrap();
        assert_eq!(snapshot.stock, Some(10));
        // A: user 1 reserves; B: user 2 reserves and its commit fails, the unit comes back.
        let one = PendingReservation {
            user: UserId::try_from(1).unwrap(),
            order: uuid::Uuid::new_v4(),
        };
        let two = PendingReservation {
            user: UserId::try_from(2).unwrap(),
            order: uuid::Uuid::new_v4(),
        };
        reservations
            .reserve(&item, one.user, one.order, None)
            .await
            .unwrap();
        reservations
            .reserve(&item, two.user, two.order, None)
            .await
            .unwrap();
        assert!(reservations.undo(item.id, two, Undo::Whole).await.unwrap());
        reservations.undo(item.id, one, Undo::Whole).await.unwrap();
        assert_eq!(
            repairs.stock_snapshot(item.id).await.unwrap().stock,
            Some(10)
        );

        assert!(
            !repairs
                .repair_if_unmoved(item.id, &snapshot, 7, None)
                .await
                .unwrap(),
            "the counter moved since the snapshot: the repair waits for the next round"
        );
        assert_eq!(redis.remaining(&[item.id]).await.unwrap(), [Some(10)]);
        let fresh = repairs.stock_snapshot(item.id).await.unwrap();
        assert!(repairs
            .repair_if_unmoved(item.id, &fresh, 7, None)
            .await
            .unwrap());
        assert_eq!(redis.remaining(&[item.id]).await.unwrap(), [Some(7)]);
    }

    #[sqlx::test]
    async fn the_reconciler_repairs_buyers_and_the_success_counter_as_well_as_stock(db: PgPool) {
        let app = spawn_app_with(&db, fast_reconciler).await;
        let item = app.open_item(10).await;
        for user in [4301, 4302] {
            let token = app.token_for(user).await;
            assert_eq!(
                app.post_seckill(&token, item, "10.26.0.1").await.status(),
                200
            );
        }
        let mut conn = app.redis().await;
        let _: () = redis::pipe()
            .cmd("SREM")
            .arg(app.item_keys(item).buyers())
            .arg(4301)
            .ignore()
            .cmd("SADD")
            .arg(app.item_keys(item).buyers())
            .arg(999)
            .ignore()
            .cmd("SET")
            .arg(app.item_keys(item).success())
            .arg(7)
            .ignore()
            .cmd("SET")
            .arg(app.item_keys(item).stock())
            .arg(3)
            .ignore()
            .query_async(&mut conn)
            .await
            .unwrap();

        eventually(
            "stock, buyers and success counter agree with postgres again",
            Duration::from_secs(10),
            || {
                let mut conn = conn.clone();
                let app = &app;
                async move {
                    let mut buyers: Vec<i64> = redis::cmd("SMEMBERS")
                        .arg(app.item_keys(item).buyers())
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    buyers.sort();
                    let state = (
                        app.redis_command::<Option<i64>>("GET", &app.item_keys(item).stock())
                            .await,
                        buyers,
                        app.redis_command::<Option<i64>>("GET", &app.item_keys(item).success())
                            .await,
                    );
                    (state == (Some(8), vec![4301, 4302], Some(2))).then_some(())
                }
            },
        )
        .await;
    }
}
