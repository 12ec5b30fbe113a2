//! Released units coming back whatever Redis went through: an item whose keys were lost
//! (ended or still on sale), a reconciler round between a give-back and its Postgres
//! mark, and the lifetime of an item's keys.

use std::time::Duration;

use sqlx::PgPool;

use seckill_test_support::{
    eventually, failpoint_lock, json, pg_remaining, quick_expiry, spawn_app_with, TestApp,
};

/// Buys `item` as `user`; answers the order id.
async fn buy(app: &TestApp, user: i64, item: i64) -> String {
    let (_, order) = app.buy(user, item).await;
    order["orderId"].as_str().expect("an order id").to_string()
}

async fn returned(db: &PgPool, order: &str) -> bool {
    let id: uuid::Uuid = order.parse().unwrap();
    sqlx::query_scalar("SELECT returned_at IS NOT NULL FROM orders WHERE id = $1")
        .bind(id)
        .fetch_one(db)
        .await
        .unwrap()
}

async fn del(app: &TestApp, key: &str) {
    app.redis_command::<i64>("DEL", key).await;
}

async fn stock(app: &TestApp, item: i64) -> Option<i64> {
    app.redis_get(&app.item_keys(item).stock()).await
}

#[sqlx::test]
async fn an_ended_item_whose_keys_are_gone_never_holds_up_another_items_returns(db: PgPool) {
    let app = spawn_app_with(&db, quick_expiry).await;
    // An ended item with more released orders than a sweep takes, all waiting for their
    // give-back, released before anything else, and its keys lost.
    let ended = app
        .create_item(600, chrono::Duration::hours(-3), chrono::Duration::hours(1))
        .await;
    sqlx::query(
        "INSERT INTO orders (id, user_id, item_id, created_at, state, pay_by, state_changed_at)
         SELECT gen_random_uuid(), 1000 + n, $1, now() - interval '150 minutes', 'expired',
                now() - interval '135 minutes', now() - interval '2 hours' + n * interval '1 ms'
         FROM generate_series(1, 510) AS n",
    )
    .bind(ended)
    .execute(&db)
    .await
    .unwrap();
    del(&app, &app.item_keys(ended).stock()).await;

    // Another item's order expires: its unit must come back to both stores.
    let on_sale = app.open_item(5).await;
    let shopper = 9_001;
    let order = buy(&app, shopper, on_sale).await;
    let (_, took) = eventually(
        "the other item's unit comes back",
        Duration::from_secs(10),
        || async { returned(&db, &order).await.then_some(()) },
    )
    .await;
    eprintln!("behind 510 ended-item orders, the unit came back {took:?} after the purchase");
    assert_eq!(stock(&app, on_sale).await, Some(5));
    assert_eq!(pg_remaining(&db, on_sale).await, 5);
    let token = app.token_for(shopper).await;
    let again = app.post_seckill(&token, on_sale, "10.90.9.1").await;
    assert_eq!(again.status(), 200, "the shopper may buy again");

    // The ended item's units are recorded in Postgres alone; its keys stay gone.
    let (unmarked, _) = eventually(
        "the ended item's orders are marked",
        Duration::from_secs(10),
        || async {
            let unmarked: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM orders WHERE item_id = $1 AND returned_at IS NULL",
            )
            .bind(ended)
            .fetch_one(&db)
            .await
            .unwrap();
            (unmarked == 0).then_some(unmarked)
        },
    )
    .await;
    assert_eq!(unmarked, 0);
    assert_eq!(stock(&app, ended).await, None);
    assert_eq!(pg_remaining(&db, ended).await, 600);
}

/// The reconciler's round lands, again and again, after the sweeper gave units back to
/// Redis and before Postgres marked them returned. It must see the two stores agree:
/// taking the units away again would sell the item out while they are on sale.
#[sqlx::test]
async fn a_reconciler_round_between_a_give_back_and_its_mark_changes_nothing(db: PgPool) {
    let _failpoints = failpoint_lock().await;
    let app = spawn_app_with(&db, |s| {
        quick_expiry(s);
        s.reconcile_interval_ms = 50;
    })
    .await;
    let units = 20;
    let item = app.open_item(units).await;
    let first = 9_200;
    let mut orders = Vec::new();
    for user in first..first + units {
        orders.push(buy(&app, user, item).await);
    }
    let keys = app.item_keys(item);
    assert_eq!(stock(&app, item).await, Some(0));

    // Every sweep owing the first shopper's unit dies after the give-back, before the
    // mark: Redis has every unit back, Postgres records none of it.
    fail::cfg("sale::before_mark_returned", &format!("return({first})")).unwrap();
    eventually(
        "redis has every unit back",
        Duration::from_secs(10),
        || async { (stock(&app, item).await == Some(units)).then_some(()) },
    )
    .await;
    app.until_reconciled(3).await;
    for order in &orders {
        assert!(
            !returned(&db, order).await,
            "no mark while the failpoint is on"
        );
    }
    assert_eq!(
        stock(&app, item).await,
        Some(units),
        "the units stay on sale"
    );
    assert_eq!(app.redis_command::<i64>("SCARD", &keys.buyers()).await, 0);
    assert_eq!(
        app.metric_sum("seckill_reconciler_repairs_total{kind=\"drift\"}")
            .await,
        0.0
    );

    fail::remove("sale::before_mark_returned");
    for order in &orders {
        eventually("the mark", Duration::from_secs(10), || async {
            returned(&db, order).await.then_some(())
        })
        .await;
    }
    app.until_reconciled(2).await;
    assert_eq!(stock(&app, item).await, Some(units));
    assert_eq!(pg_remaining(&db, item).await as i64, units);
    assert_eq!(
        app.metric_sum("seckill_reconciler_repairs_total{kind=\"drift\"}")
            .await,
        0.0
    );
    let late = app.token_for(first + units).await;
    assert_eq!(
        app.post_seckill(&late, item, "10.90.99.1").await.status(),
        200
    );
}

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

    #[sqlx::test]
    async fn an_item_on_sale_that_lost_its_stock_counter_is_rebuilt_before_its_units_come_back(
        db: PgPool,
    ) {
        let app = spawn_app_with(&db, quick_expiry).await;
        let item = app.open_item(3).await;
        let shopper = 9_101;
        let order = buy(&app, shopper, item).await;
        let keys = app.item_keys(item);
        del(&app, &keys.stock()).await;

        eventually("the unit comes back", Duration::from_secs(5), || async {
            returned(&db, &order).await.then_some(())
        })
        .await;
        assert_eq!(stock(&app, item).await, Some(3), "rebuilt, then given back");
        assert_eq!(pg_remaining(&db, item).await, 3);
        assert_eq!(
            app.redis_command::<i64>("SCARD", &keys.buyers()).await,
            0,
            "the shopper is no buyer any more"
        );
    }

    #[sqlx::test]
    async fn every_key_of_an_item_expires_an_hour_after_its_last_payment_deadline(db: PgPool) {
        let deadline = 600;
        let app = spawn_app_with(&db, |s| {
            s.payment_deadline_secs = deadline;
            s.reconcile_interval_ms = 50;
        })
        .await;
        let item = app.open_item(5).await;
        buy(&app, 9_301, item).await;
        let cancelled = buy(&app, 9_302, item).await;
        let token = app.token_for(9_302).await;
        let cancel = app.order_call(&token, &cancelled, "cancel", None).await;
        assert_eq!(cancel.status(), 200);

        let items = json(app.get("/api/items").await).await;
        let ends_at: chrono::DateTime<chrono::Utc> = items["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == item)
            .unwrap()["endsAt"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        let expected =
            (ends_at + chrono::Duration::seconds(deadline as i64) + chrono::Duration::hours(1))
                .timestamp_millis();

        let keys = app.item_keys(item);
        let must_exist = [
            keys.stock(),
            keys.version(),
            keys.buyers(),
            keys.success(),
            keys.orders(),
            keys.returned(),
        ];
        app.until_reconciled(1).await;
        for key in must_exist {
            assert_eq!(
                app.redis_command::<i64>("PEXPIRETIME", &key).await,
                expected,
                "{key} expires with the item"
            );
        }
    }
}
