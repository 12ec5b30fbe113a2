//! A purchase cut between the stores: a crash before or after the commit, a commit that
//! outlives its timeout, and one whose answer is lost. Redis and Postgres end up agreeing.

use std::time::Duration;

use sqlx::PgPool;

use super::{fast_reconciler, slow_commits};
use seckill_test_support::{
    eventually, failpoint_lock, json, pg_orders, pg_remaining, spawn_app, spawn_app_from,
    spawn_app_with,
};

#[sqlx::test]
async fn a_crash_after_the_commit_keeps_the_order_and_redis_agrees(db: PgPool) {
    let app = spawn_app_with(&db, fast_reconciler).await;
    let item = app.open_item(5).await;
    let user = 880_002;
    let token = app.token_for(user).await;

    fail::cfg("sale::after_commit", &format!("return({user})")).unwrap();
    let crashed = app.post_seckill(&token, item, "10.23.0.1").await;
    fail::remove("sale::after_commit");
    assert_eq!(crashed.status(), 503, "the client never heard of its order");
    assert_eq!(pg_orders(&db, item).await, 1, "but the order stands");

    app.until_nothing_pending(
        item,
        "the reconciler settles the pending reservation",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(
        app.redis_command::<Option<i64>>("GET", &app.item_keys(item).stock())
            .await,
        Some(4)
    );
    assert_eq!(
        app.redis_command::<Option<i64>>("GET", &app.item_keys(item).success())
            .await,
        Some(1)
    );
    let remaining = pg_remaining(&db, item).await;
    assert_eq!(remaining, 4);
    let again = app.post_seckill(&token, item, "10.23.0.1").await;
    assert_eq!(json(again).await["code"], "ALREADY_PURCHASED");
}

#[sqlx::test]
async fn a_commit_whose_answer_is_lost_but_which_committed_is_a_success(db: PgPool) {
    let _failpoints = failpoint_lock().await;
    let app = spawn_app(&db).await;
    let item = app.open_item(5).await;
    let user = 4401;
    let token = app.token_for(user).await;

    fail::cfg("sale::commit_unanswered", &format!("return({user})")).unwrap();
    let response = app.post_seckill(&token, item, "10.27.0.1").await;
    fail::remove("sale::commit_unanswered");
    assert_eq!(response.status(), 200, "txid_status said committed");
    let body = json(response).await;
    let order: String = sqlx::query_scalar("SELECT id::text FROM orders WHERE user_id = $1")
        .bind(user)
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(body["orderId"], order.as_str());
    // The reconciler runs every 10 s: within 2 s it can only be the committer's ZREM.
    app.until_nothing_pending(item, "settled by the committer", Duration::from_secs(2))
        .await;
    assert_eq!(
        (
            app.redis_command::<Option<i64>>("GET", &app.item_keys(item).stock())
                .await,
            app.redis_command::<Option<i64>>("GET", &app.item_keys(item).success())
                .await,
            pg_remaining(&db, item).await,
        ),
        (Some(4), Some(1), 4)
    );
}

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

    #[sqlx::test]
    async fn a_crash_between_reservation_and_commit_is_undone_by_the_reconciler(db: PgPool) {
        let app = spawn_app_with(&db, fast_reconciler).await;
        let second = spawn_app_from(app.settings.clone()).await;
        let item = app.open_item(1).await;
        let user = 880_001;
        let token = app.token_for(user).await;

        fail::cfg("sale::before_commit", &format!("return({user})")).unwrap();
        let crashed = app.post_seckill(&token, item, "10.22.0.1").await;
        fail::remove("sale::before_commit");
        assert_eq!(crashed.status(), 503);
        assert_eq!(
            app.redis_command::<Option<i64>>("GET", &app.item_keys(item).stock())
                .await,
            Some(0),
            "the unit is reserved"
        );
        for instance in [&app, &second] {
            eventually(
                "the last unit reserved: sold out everywhere",
                Duration::from_secs(10),
                || async {
                    (instance.metric_sum("seckill_sold_out_items").await == 1.0).then_some(())
                },
            )
            .await;
        }

        let (_, took) = eventually(
            "the reconciler gives the unit back",
            Duration::from_secs(10),
            || async {
                (app.redis_command::<Option<i64>>("GET", &app.item_keys(item).stock())
                    .await
                    == Some(1))
                .then_some(())
            },
        )
        .await;
        println!("abandoned reservation released after {took:?}");
        assert_eq!(
            app.redis_command::<Option<i64>>("ZCARD", &app.item_keys(item).pending())
                .await,
            Some(0)
        );
        assert_eq!(
            app.redis_command::<Option<i64>>("GET", &app.item_keys(item).success())
                .await,
            Some(0)
        );
        for instance in [&app, &second] {
            eventually(
                "stock is back: the sold-out flag is lifted everywhere",
                Duration::from_secs(10),
                || async {
                    (instance.metric_sum("seckill_sold_out_items").await == 0.0).then_some(())
                },
            )
            .await;
        }
        assert_eq!(
            app.post_seckill(&token, item, "10.22.0.1").await.status(),
            200,
            "the user can buy again"
        );
        assert_eq!(pg_orders(&db, item).await, 1);
    }

    #[sqlx::test]
    async fn a_commit_that_outlives_its_timeout_is_resolved_for_what_it_is(db: PgPool) {
        slow_commits(&db, 1.5, &[4201], &[4202]).await;
        let app = spawn_app_with(&db, |s| {
            s.order_commit_timeout_ms = 300;
            s.database_statement_timeout_ms = 3_000;
            s.database_idle_in_transaction_timeout_ms = 500;
            s.reservation_deadline_ms = 5_000;
            s.reconcile_interval_ms = 200;
        })
        .await;
        let (lands, fails) = (app.open_item(10).await, app.open_item(10).await);
        let (lander, failer) = (app.token_for(4201).await, app.token_for(4202).await);

        // One after the other, so that each COMMIT is its own batch's.
        let landed = app.post_seckill(&lander, lands, "10.25.0.1").await;
        let failed = app.post_seckill(&failer, fails, "10.25.0.2").await;
        // At the timeout both COMMITs are still running: nobody is told "failed".
        for response in [landed, failed] {
            assert_eq!(response.status(), 202);
            let body = json(response).await;
            assert_eq!(body["code"], "ORDER_PENDING", "{body}");
            assert!(body["orderId"].is_string(), "{body}");
        }

        for item in [lands, fails] {
            app.until_nothing_pending(
                item,
                "the reconciler resolves the pending reservation",
                Duration::from_secs(20),
            )
            .await;
        }
        for item in [lands, fails] {
            assert_eq!(
                app.redis_command::<Option<i64>>("HLEN", &app.item_keys(item).in_doubt())
                    .await,
                Some(0),
                "the in-doubt records are gone once resolved"
            );
        }
        // The order that committed stands everywhere; the one that failed left no trace.
        assert_eq!(
            (pg_orders(&db, lands).await, pg_remaining(&db, lands).await),
            (1, 9)
        );
        assert_eq!(
            (pg_orders(&db, fails).await, pg_remaining(&db, fails).await),
            (0, 10)
        );
        let mut conn = app.redis().await;
        for (item, stock, buyers, success) in [(lands, 9, vec!["4201"], 1), (fails, 10, vec![], 0)]
        {
            let members: Vec<String> = redis::cmd("SMEMBERS")
                .arg(app.item_keys(item).buyers())
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(
                (
                    app.redis_command::<Option<i64>>("GET", &app.item_keys(item).stock())
                        .await,
                    members,
                    app.redis_command::<Option<i64>>("GET", &app.item_keys(item).success())
                        .await
                        .unwrap_or(0),
                ),
                (
                    Some(stock),
                    buyers.iter().map(|b| b.to_string()).collect(),
                    success
                ),
                "item {item}: redis agrees with postgres"
            );
        }
    }
}
