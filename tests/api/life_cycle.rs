//! After the click: paying, cancelling and expiring orders, and the unit a released
//! order gives back exactly once to both stores.

use std::time::Duration;

use sqlx::PgPool;

use seckill_test_support::{
    eventually, failpoint_lock, json, pg_remaining, quick_expiry, spawn_app_with, TestApp,
};

fn patient(s: &mut seckill::configuration::Settings) {
    s.payment_deadline_secs = 600;
}

async fn is_buyer(app: &TestApp, item: i64, user: i64) -> bool {
    let mut conn = app.redis().await;
    redis::cmd("SISMEMBER")
        .arg(app.item_keys(item).buyers())
        .arg(user)
        .query_async(&mut conn)
        .await
        .unwrap()
}

async fn order_row(db: &PgPool, order: &str) -> (String, bool) {
    let id: uuid::Uuid = order.parse().unwrap();
    sqlx::query_as("SELECT state, returned_at IS NOT NULL FROM orders WHERE id = $1")
        .bind(id)
        .fetch_one(db)
        .await
        .unwrap()
}

#[sqlx::test]
async fn a_paid_order_stays_paid_and_only_pending_orders_move(db: PgPool) {
    let app = spawn_app_with(&db, patient).await;
    let item = app.open_item(5).await;
    let (token, order) = app.buy(7_001, item).await;
    assert_eq!(order["state"], "pending_payment");
    assert!(order["payBy"].is_string());
    let id = order["orderId"].as_str().unwrap();

    let paid = app.order_call(&token, id, "pay", None).await;
    assert_eq!(paid.status(), 200);
    assert_eq!(json(paid).await["state"], "paid");

    for what in ["pay", "cancel"] {
        let again = app.order_call(&token, id, what, None).await;
        assert_eq!(again.status(), 409, "{what} of a paid order");
        let body = json(again).await;
        assert_eq!(body["code"], "ORDER_STATE");
        assert_eq!(body["state"], "paid");
    }
    // A retried payment that carries its key hears the success again.
    let retried = app.order_call(&token, id, "pay", Some("pay-7001")).await;
    assert_eq!(retried.status(), 200);
    assert_eq!(json(retried).await["state"], "paid");

    // Someone else's order, an unknown one, and no order id at all.
    let stranger = app.token_for(7_002).await;
    let theirs = app.order_call(&stranger, id, "cancel", None).await;
    assert_eq!(theirs.status(), 404);
    assert_eq!(json(theirs).await["code"], "ORDER_NOT_FOUND");
    let unknown = app
        .order_call(&token, &uuid::Uuid::now_v7().to_string(), "pay", None)
        .await;
    assert_eq!(unknown.status(), 404);
    assert_eq!(
        app.order_call(&token, "not-a-uuid", "pay", None)
            .await
            .status(),
        404
    );
    let anonymous = app
        .client
        .post(app.url(&format!("/api/orders/{id}/pay")))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    assert_eq!(order_row(&db, id).await, ("paid".into(), false));
    assert_eq!(
        pg_remaining(&db, item).await,
        4,
        "a paid order keeps its unit"
    );
}

#[sqlx::test]
async fn a_cancelled_order_gives_its_unit_back_once_and_lifts_sold_out(db: PgPool) {
    let app = spawn_app_with(&db, patient).await;
    let item = app.open_item(1).await;
    let (token, order) = app.buy(7_101, item).await;
    let id = order["orderId"].as_str().unwrap().to_string();
    let late = app.token_for(7_102).await;
    let refused = app.post_seckill(&late, item, "10.71.0.2").await;
    assert_eq!(json(refused).await["code"], "SOLD_OUT");

    let cancelled = app.order_call(&token, &id, "cancel", None).await;
    assert_eq!(cancelled.status(), 200);
    assert_eq!(json(cancelled).await["state"], "cancelled");
    for what in ["cancel", "pay"] {
        let again = app.order_call(&token, &id, what, Some("retry-7101")).await;
        assert_eq!(again.status(), 409, "{what} of a cancelled order");
        assert_eq!(json(again).await["state"], "cancelled");
    }

    let keys = app.item_keys(item);
    assert_eq!(app.redis_get::<Option<i64>>(&keys.stock()).await, Some(1));
    assert_eq!(app.redis_get::<Option<i64>>(&keys.success()).await, Some(0));
    assert!(!is_buyer(&app, item, 7_101).await);
    assert_eq!(pg_remaining(&db, item).await, 1);
    assert_eq!(order_row(&db, &id).await, ("cancelled".into(), true));

    // The unit is on sale again, on every instance's sold-out board.
    eventually(
        "the released unit sells",
        Duration::from_secs(5),
        || async {
            let response = app.post_seckill(&late, item, "10.71.0.3").await;
            (response.status() == 200).then_some(())
        },
    )
    .await;
    assert_eq!(pg_remaining(&db, item).await, 0);
    assert_eq!(app.redis_get::<Option<i64>>(&keys.stock()).await, Some(0));

    // The first shopper may buy again (the default), and now finds it sold out.
    let rebuy = app.post_seckill(&token, item, "10.71.0.4").await;
    assert_eq!(json(rebuy).await["code"], "SOLD_OUT");
}

#[sqlx::test]
async fn without_rebuys_a_released_shopper_cannot_buy_the_item_again(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        patient(s);
        s.rebuy_after_release = false;
    })
    .await;
    let item = app.open_item(3).await;
    let (token, order) = app.buy(7_201, item).await;
    let id = order["orderId"].as_str().unwrap();
    assert_eq!(
        app.order_call(&token, id, "cancel", None).await.status(),
        200
    );
    assert_eq!(
        app.redis_get::<Option<i64>>(&app.item_keys(item).stock())
            .await,
        Some(3)
    );
    let again = app.post_seckill(&token, item, "10.72.0.2").await;
    assert_eq!(json(again).await["code"], "ALREADY_PURCHASED");
}

#[sqlx::test]
async fn an_unpaid_order_expires_and_its_unit_comes_back(db: PgPool) {
    let app = spawn_app_with(&db, quick_expiry).await;
    let item = app.open_item(2).await;
    let (token, order) = app.buy(7_301, item).await;
    let id = order["orderId"].as_str().unwrap().to_string();

    eventually(
        "the order expires and is returned",
        Duration::from_secs(10),
        || async { (order_row(&db, &id).await == ("expired".into(), true)).then_some(()) },
    )
    .await;
    let keys = app.item_keys(item);
    assert_eq!(app.redis_get::<Option<i64>>(&keys.stock()).await, Some(2));
    assert_eq!(app.redis_get::<Option<i64>>(&keys.success()).await, Some(0));
    assert_eq!(pg_remaining(&db, item).await, 2);
    for what in ["pay", "cancel"] {
        let late = app.order_call(&token, &id, what, None).await;
        assert_eq!(late.status(), 409, "{what} of an expired order");
        assert_eq!(json(late).await["state"], "expired");
    }
    assert_eq!(app.metric_sum("seckill_units_returned_total").await, 1.0);
}

#[sqlx::test]
async fn a_sweeper_that_dies_between_the_stores_is_finished_by_the_next_without_a_second_give_back(
    db: PgPool,
) {
    let _failpoints = failpoint_lock().await;
    let app = spawn_app_with(&db, quick_expiry).await;
    let item = app.open_item(1).await;
    let user = 7_401;
    let (_, order) = app.buy(user, item).await;
    let id = order["orderId"].as_str().unwrap().to_string();
    let keys = app.item_keys(item);

    // Every sweep dies after expiring the order in Postgres, before Redis hears of it.
    fail::cfg("sale::before_give_back", &format!("return({user})")).unwrap();
    eventually(
        "the order expires in postgres",
        Duration::from_secs(10),
        || async { (order_row(&db, &id).await == ("expired".into(), false)).then_some(()) },
    )
    .await;
    assert_eq!(
        pg_remaining(&db, item).await,
        1,
        "postgres has the unit back"
    );
    assert_eq!(
        app.redis_get::<Option<i64>>(&keys.stock()).await,
        Some(0),
        "redis does not yet"
    );
    assert!(is_buyer(&app, item, user).await);

    // Now the next five sweeps die after the give-back, before Postgres records it:
    // Redis is asked five times and must give the unit back once; the sixth marks it.
    fail::cfg("sale::before_mark_returned", &format!("5*return({user})")).unwrap();
    fail::remove("sale::before_give_back");
    eventually(
        "postgres records the return",
        Duration::from_secs(10),
        || async { (order_row(&db, &id).await == ("expired".into(), true)).then_some(()) },
    )
    .await;
    fail::remove("sale::before_mark_returned");

    assert_eq!(app.metric_sum("seckill_units_returned_total").await, 1.0);
    assert_eq!(
        app.redis_get::<Option<i64>>(&keys.stock()).await,
        Some(1),
        "given back once"
    );
    assert_eq!(app.redis_get::<Option<i64>>(&keys.success()).await, Some(0));
    assert!(!is_buyer(&app, item, user).await);
    assert_eq!(pg_remaining(&db, item).await, 1);
}

#[sqlx::test]
async fn at_the_deadline_a_payment_and_the_sweeper_never_both_win(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        quick_expiry(s);
        s.expiry_sweep_interval_ms = 5;
    })
    .await;
    let orders = 30;
    let item = app.open_item(orders).await;
    let mut placed = Vec::new();
    for user in 0..orders {
        let (token, order) = app.buy(7_500 + user, item).await;
        let pay_by: chrono::DateTime<chrono::Utc> =
            order["payBy"].as_str().unwrap().parse().unwrap();
        placed.push((
            token,
            order["orderId"].as_str().unwrap().to_string(),
            pay_by,
        ));
    }
    // Each payment is sent within a few milliseconds of its order's deadline, before
    // or after, while the sweeper runs every 5 ms.
    let payments = placed.iter().enumerate().map(|(i, (token, id, pay_by))| {
        let app = &app;
        async move {
            let offset = chrono::Duration::milliseconds(i as i64 % 11 - 5);
            let wait = (*pay_by + offset - chrono::Utc::now())
                .to_std()
                .unwrap_or_default();
            tokio::time::sleep(wait).await;
            app.order_call(token, id, "pay", None)
                .await
                .status()
                .as_u16()
        }
    });
    let statuses = futures_util::future::join_all(payments).await;

    let mut paid = 0;
    for ((_, id, _), status) in placed.iter().zip(&statuses) {
        let (state, _) = eventually("the order settles", Duration::from_secs(10), || async {
            let row = order_row(&db, id).await;
            (row.0 != "pending_payment" && (row.0 == "paid" || row.1)).then_some(row)
        })
        .await
        .0;
        match *status {
            200 => assert_eq!(state, "paid", "a 200 payment must be the winner"),
            409 => assert_eq!(state, "expired", "a refused payment lost to the sweeper"),
            other => panic!("payment answered {other}"),
        }
        paid += i64::from(*status == 200);
    }
    let expired = orders - paid;
    eprintln!("at the deadline: {paid} paid, {expired} expired");
    assert_eq!(pg_remaining(&db, item).await as i64, expired);
    assert_eq!(
        app.redis_get::<Option<i64>>(&app.item_keys(item).stock())
            .await,
        Some(expired)
    );
    assert_eq!(
        app.metric_sum("seckill_units_returned_total").await as i64,
        expired
    );
}

#[sqlx::test]
async fn operators_see_every_state_per_item_and_can_filter_by_it(db: PgPool) {
    let app = spawn_app_with(&db, patient).await;
    let item = app.open_item(5).await;
    let (paying, paid) = app.buy(7_601, item).await;
    let (cancelling, cancelled) = app.buy(7_602, item).await;
    app.buy(7_603, item).await;
    let paid = paid["orderId"].as_str().unwrap();
    let cancelled = cancelled["orderId"].as_str().unwrap();
    assert_eq!(
        app.order_call(&paying, paid, "pay", None).await.status(),
        200
    );
    assert_eq!(
        app.order_call(&cancelling, cancelled, "cancel", None)
            .await
            .status(),
        200
    );

    let stats = json(app.admin_get("/admin/api/stats").await).await;
    assert_eq!(
        stats["ordersByState"][item.to_string()],
        serde_json::json!({ "pending_payment": 1, "paid": 1, "cancelled": 1, "expired": 0 })
    );
    let only = json(
        app.admin_get(&format!("/admin/api/orders?item={item}&state=cancelled"))
            .await,
    )
    .await;
    assert_eq!(only["total"], 1);
    assert_eq!(only["orders"][0]["orderId"], cancelled);
    assert_eq!(only["orders"][0]["state"], "cancelled");
    let bogus = app.admin_get("/admin/api/orders?state=refunded").await;
    assert_eq!(bogus.status(), 400);
    assert_eq!(json(bogus).await["field"], "state");
}
