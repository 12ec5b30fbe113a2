//! Group commit: several purchases' orders written in one batch.
//!
//! To get a batch of a known make-up, a "gate" purchase is stalled in the committer
//! (failpoint `committer::stall`, aimed at the gate's user) while the purchases under
//! test queue up behind it; then the gate is opened and they form the next batch.

use std::time::Duration;

use sqlx::PgPool;

use seckill_test_support::{
    eventually, failpoint_lock, json, pg_orders, pg_remaining, spawn_app, TestApp,
};

/// Orders queued and not yet in a batch.
async fn queued(app: &TestApp) -> f64 {
    app.metric_sum("seckill_commit_queue_orders").await
}

/// Batches the committer has taken so far.
async fn batches(app: &TestApp) -> f64 {
    app.metric_sum("seckill_commit_batch_size_count").await
}

/// The gate: a purchase stalled in the committer, and the batches taken before it.
struct Gate {
    purchase: tokio::task::JoinHandle<u16>,
    batches_before: f64,
}

/// Starts the gate user's purchase and waits until the committer is stalled on it.
async fn close_gate(app: &TestApp, item: i64, gate_user: i64) -> Gate {
    let batches_before = batches(app).await;
    fail::cfg("committer::stall", &format!("return({gate_user})")).unwrap();
    let token = app.token_for(gate_user).await;
    let client = app.client.clone();
    let url = app.url("/seckill");
    let gate = tokio::spawn(async move {
        client
            .post(url)
            .bearer_auth(token)
            .header("X-Forwarded-For", "10.40.0.1")
            .json(&serde_json::json!({ "itemId": item }))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    eventually(
        "the gate purchase reached the committer",
        Duration::from_secs(10),
        || async { (batches(app).await > batches_before).then_some(()) },
    )
    .await;
    Gate {
        purchase: gate,
        batches_before,
    }
}

/// Sends the purchases of `users` while the gate holds the committer, waits until they
/// are all queued, opens the gate, and answers their (status, code), in `users` order.
async fn one_batch(
    app: &TestApp,
    item: i64,
    gate: Gate,
    users: &[i64],
) -> Vec<(u16, Option<String>)> {
    let mut tokens = Vec::new();
    for user in users {
        tokens.push(app.token_for(*user).await);
    }
    let purchases = futures_util::future::join_all(tokens.iter().enumerate().map(|(n, token)| {
        let ip = format!("10.41.0.{}", n + 1);
        async move {
            let response = app.post_seckill(token, item, &ip).await;
            let status = response.status().as_u16();
            (
                status,
                json(response).await["code"].as_str().map(String::from),
            )
        }
    }));
    let open = async {
        eventually(
            "every purchase waits in the queue",
            Duration::from_secs(10),
            || async { (queued(app).await >= users.len() as f64).then_some(()) },
        )
        .await;
        fail::remove("committer::stall");
    };
    let (answers, ()) = tokio::join!(purchases, open);
    assert_eq!(gate.purchase.await.unwrap(), 200, "the gate's own order");
    // The batch after the gate's held every one of them.
    assert_eq!(batches(app).await, gate.batches_before + 2.0);
    answers
}

#[sqlx::test]
async fn a_batch_with_a_user_who_already_holds_an_order_answers_that_one_already_purchased(
    db: PgPool,
) {
    let _failpoints = failpoint_lock().await;
    let app = spawn_app(&db).await;
    let item = app.open_item(10).await;
    let repeat = 5101;
    let token = app.token_for(repeat).await;
    assert_eq!(
        app.post_seckill(&token, item, "10.42.0.1").await.status(),
        200
    );
    // Redis forgets the buyer: only Postgres's unique constraint can refuse them now.
    let mut conn = app.redis().await;
    let _: i64 = redis::cmd("SREM")
        .arg(app.item_keys(item).buyers())
        .arg(repeat)
        .query_async(&mut conn)
        .await
        .unwrap();
    let gate = close_gate(&app, item, 5100).await;
    let answers = one_batch(&app, item, gate, &[5102, repeat, 5103]).await;

    assert_eq!(
        answers,
        [
            (200, None),
            (409, Some("ALREADY_PURCHASED".into())),
            (200, None)
        ]
    );
    assert_eq!(
        pg_orders(&db, item).await,
        4,
        "first order, gate, two of the batch"
    );
    assert_eq!(pg_remaining(&db, item).await, 6);
    let stock: i64 = redis::cmd("GET")
        .arg(app.item_keys(item).stock())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stock, 6, "the refused unit went back to Redis");
}

#[sqlx::test]
async fn a_batch_the_stock_check_refuses_is_replayed_order_by_order(db: PgPool) {
    let _failpoints = failpoint_lock().await;
    let app = spawn_app(&db).await;
    let item = app.open_item(10).await;
    let gate = close_gate(&app, item, 5200).await;
    // Postgres holds fewer units than Redis believes: the gate's and two more.
    sqlx::query("UPDATE items SET remaining_stock = 3 WHERE id = $1")
        .bind(item)
        .execute(&db)
        .await
        .unwrap();
    let answers = one_batch(&app, item, gate, &[5201, 5202, 5203, 5204]).await;

    let mut answers = answers;
    answers.sort();
    assert_eq!(
        answers,
        [
            (200, None),
            (200, None),
            (409, Some("SOLD_OUT".into())),
            (409, Some("SOLD_OUT".into()))
        ]
    );
    assert_eq!(pg_orders(&db, item).await, 3);
    assert_eq!(pg_remaining(&db, item).await, 0, "never below zero");
    let mut conn = app.redis().await;
    let stock: i64 = redis::cmd("GET")
        .arg(app.item_keys(item).stock())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stock, 0, "Redis learns it is sold out");
}

#[sqlx::test]
async fn a_batch_whose_commit_answer_is_lost_is_resolved_before_anyone_is_told(db: PgPool) {
    let _failpoints = failpoint_lock().await;
    let app = spawn_app(&db).await;
    let item = app.open_item(10).await;
    let gate = close_gate(&app, item, 5300).await;
    fail::cfg("sale::commit_unanswered", "return(5302)").unwrap();
    let answers = one_batch(&app, item, gate, &[5301, 5302, 5303]).await;
    fail::remove("sale::commit_unanswered");

    // Postgres says the transaction committed: all three are orders, told 200.
    assert_eq!(answers, [(200, None), (200, None), (200, None)]);
    assert_eq!(pg_orders(&db, item).await, 4);
    // The reconciler runs every 10 s: within 2 s it can only be the committer's ZREM.
    app.until_nothing_pending(
        item,
        "the batch's reservations are settled",
        Duration::from_secs(2),
    )
    .await;
}
