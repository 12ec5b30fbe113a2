//! Group commit: several purchases' orders written in one batch.
//!
//! To get a batch of a known make-up, a "gate" purchase is stalled in the committer
//! (failpoint `committer::stall`, aimed at the gate's user) while the purchases under
//! test queue up behind it; then the gate is opened and they form the next batch.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgSslMode;
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use seckill::domain::{ItemId, UserId};
use seckill::sale::records::{commit_orders, CommitConnections, CommitSessionCount, NewOrder};
use seckill_test_support::{
    eventually, failpoint_lock, json, pg_orders, pg_remaining, spawn_app, spawn_app_with, TestApp,
};

/// Orders queued and not yet in a batch.
async fn queued(app: &TestApp) -> f64 {
    app.metric_sum("seckill_commit_queue_orders").await
}

/// Batches the committer has taken so far.
async fn batches(app: &TestApp) -> f64 {
    app.metric_sum("seckill_commit_batch_size_count").await
}

/// An app with one worker thread, so one committer: the gate's stall holds every
/// order behind it (with two, the other worker's committer would take some).
async fn one_committer(db: &PgPool) -> TestApp {
    spawn_app_with(db, |s| s.workers = Some(1)).await
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
    let app = one_committer(&db).await;
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
    let app = one_committer(&db).await;
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
    let app = one_committer(&db).await;
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

/// A TCP proxy in front of Postgres that counts the exchanges its clients have with it:
/// one per `ReadyForQuery` the server sends, which ends a simple query and an extended
/// protocol's `Sync` alike (so `BEGIN`, a statement and `COMMIT` are three).
async fn exchange_counter(upstream: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let exchanges = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&exchanges);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let server = TcpStream::connect(upstream).await.unwrap();
                let (mut client_in, mut client_out) = client.into_split();
                let (mut server_in, mut server_out) = server.into_split();
                let up = tokio::io::copy(&mut client_in, &mut server_out);
                let down = async move {
                    // Server messages: a type byte, then a length that counts itself.
                    let (mut pending, mut chunk) = (Vec::new(), [0u8; 8192]);
                    loop {
                        let n = server_in.read(&mut chunk).await?;
                        if n == 0 {
                            return Ok::<_, std::io::Error>(());
                        }
                        client_out.write_all(&chunk[..n]).await?;
                        pending.extend_from_slice(&chunk[..n]);
                        let mut at = 0;
                        while pending.len() - at >= 5 {
                            let length =
                                u32::from_be_bytes(pending[at + 1..at + 5].try_into().unwrap());
                            let end = at + 1 + length as usize;
                            if pending.len() < end {
                                break;
                            }
                            if pending[at] == b'Z' {
                                counted.fetch_add(1, Ordering::SeqCst);
                            }
                            at = end;
                        }
                        pending.drain(..at);
                    }
                };
                let _ = tokio::join!(up, down);
            });
        }
    });
    (address, exchanges)
}

#[sqlx::test]
async fn a_batch_commits_in_one_exchange_with_postgres(db: PgPool) {
    let app = spawn_app(&db).await;
    let item = app.open_item(10).await;
    let options = db.connect_options().as_ref().clone();
    let upstream = tokio::net::lookup_host((options.get_host(), options.get_port()))
        .await
        .unwrap()
        .next()
        .unwrap();
    let (proxy, exchanges) = exchange_counter(upstream).await;
    let sessions = Arc::new(CommitSessionCount::default());
    let mut connections = CommitConnections::new(
        options
            .host("127.0.0.1")
            .port(proxy.port())
            .ssl_mode(PgSslMode::Disable),
        1,
        Arc::clone(&sessions),
    );
    let price: i64 = sqlx::query_scalar("SELECT price_cents FROM items WHERE id = $1")
        .bind(item)
        .fetch_one(&db)
        .await
        .unwrap();
    let order = |user: i64| NewOrder {
        id: uuid::Uuid::now_v7(),
        user: UserId::try_from(user).unwrap(),
        item: ItemId::try_from(item).unwrap(),
        price_cents: price,
    };
    // The exchanges of one batch, from the committer's session idle to idle again.
    let mut exchanges_of = async |orders: Vec<NewOrder>| {
        let ids: Vec<_> = orders.iter().map(|o| Ok(o.id)).collect();
        let before = exchanges.load(Ordering::SeqCst);
        let outcomes: Vec<_> = commit_orders(
            &mut connections,
            &orders,
            Duration::from_secs(30),
            Duration::from_secs(60),
        )
        .await
        .into_iter()
        .map(|o| o.map(|o| o.id).map_err(|e| format!("{e:#}")))
        .collect();
        assert_eq!(outcomes, ids);
        assert_eq!(
            (sessions.open(), sessions.idle()),
            (1, 1),
            "the session is back"
        );
        exchanges.load(Ordering::SeqCst) - before
    };
    // The first batch also opens the session and prepares the statement.
    assert_eq!(exchanges_of(vec![order(5401)]).await, 3);
    assert_eq!(
        exchanges_of(vec![order(5402), order(5403), order(5404)]).await,
        1,
        "the statement with its commit: no BEGIN, no COMMIT, no ping"
    );
    assert_eq!(
        (pg_orders(&db, item).await, pg_remaining(&db, item).await),
        (4, 6)
    );
    // Its session gone, the test's database can be dropped at once.
    drop(connections);
    assert_eq!(sessions.open(), 0);
}

#[sqlx::test]
async fn a_batch_still_waiting_for_the_item_when_its_answer_is_given_up_never_lands(db: PgPool) {
    let app = spawn_app_with(&db, |s| s.order_commit_timeout_ms = 300).await;
    let item = app.open_item(10).await;
    let token = app.token_for(5501).await;
    // An operator's edit holds the item's row: the batch's statement waits behind it.
    let mut edit = db.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM items WHERE id = $1 FOR UPDATE")
        .bind(item)
        .execute(&mut *edit)
        .await
        .unwrap();

    let response = app.post_seckill(&token, item, "10.43.0.1").await;
    // Settled past its timeout: the batch's key taken before the statement could write
    // it, so the order was not written and never will be.
    let status = response.status();
    let body = json(response).await;
    assert_eq!(
        (status.as_u16(), &body["code"]),
        (503, &serde_json::json!("ORDER_FAILED")),
        "{body}"
    );

    edit.rollback().await.unwrap();
    eventually(
        "the batch's statement has run",
        Duration::from_secs(10),
        || async {
            let running: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND pid <> pg_backend_pid()
                   AND state <> 'idle' AND query LIKE '%INSERT INTO order_batches%'",
            )
            .fetch_one(&db)
            .await
            .unwrap();
            (running == 0).then_some(())
        },
    )
    .await;
    assert_eq!(
        (pg_orders(&db, item).await, pg_remaining(&db, item).await),
        (0, 10)
    );
    assert_eq!(
        app.redis_command::<Option<i64>>("GET", &app.item_keys(item).stock())
            .await,
        Some(10),
        "the unit is back in Redis"
    );
}

/// The advisory lock that holds chosen orders at their COMMIT ([`commits_wait_at_the_gate`]).
const COMMIT_GATE: i64 = 38;

/// In this test's own database, the orders of `users` wait at their COMMIT (a deferred
/// trigger) until the advisory lock [`COMMIT_GATE`] is free, then commit, or fail when
/// `fail` is set.
async fn commits_wait_at_the_gate(db: &PgPool, users: &[i64], fail: bool) {
    let users: Vec<String> = users.iter().map(i64::to_string).collect();
    // Built from numbers only (the test's own ids).
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        r#"CREATE FUNCTION wait_at_the_gate() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.user_id = ANY(ARRAY[{users}]::bigint[]) THEN
               PERFORM pg_advisory_xact_lock({COMMIT_GATE});
               IF {fail} THEN RAISE EXCEPTION 'refused at commit'; END IF;
             END IF;
             RETURN NULL;
           END $$;
           CREATE CONSTRAINT TRIGGER wait_at_the_gate AFTER INSERT ON orders
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION wait_at_the_gate();"#,
        users = users.join(","),
    )))
    .execute(db)
    .await
    .unwrap();
}

/// Holds the advisory lock [`COMMIT_GATE`] while the purchase of `user` runs past its commit timeout, lets
/// go once the purchase's settle waits for the batch's statement, and answers the
/// purchase's (status, code).
async fn purchase_settled_while_its_statement_runs(
    app: &TestApp,
    db: &PgPool,
    item: i64,
    user: i64,
) -> (u16, Option<String>) {
    let mut holder = db.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(COMMIT_GATE)
        .execute(&mut *holder)
        .await
        .unwrap();
    let token = app.token_for(user).await;
    let (response, ()) = tokio::join!(app.post_seckill(&token, item, "10.44.0.1"), async {
        eventually(
            "the settle waits for the batch's statement",
            Duration::from_secs(10),
            || async {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND wait_event_type = 'Lock'
                       AND query LIKE 'INSERT INTO order_batches (id) VALUES%'",
                )
                .fetch_one(db)
                .await
                .unwrap();
                (waiting == 1).then_some(())
            },
        )
        .await;
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(COMMIT_GATE)
            .execute(&mut *holder)
            .await
            .unwrap();
    });
    let status = response.status().as_u16();
    (
        status,
        json(response).await["code"].as_str().map(String::from),
    )
}

#[sqlx::test]
async fn a_batch_whose_answer_is_late_is_settled_as_committed_once_its_statement_commits(
    db: PgPool,
) {
    commits_wait_at_the_gate(&db, &[5601], false).await;
    let app = spawn_app_with(&db, |s| s.order_commit_timeout_ms = 300).await;
    let item = app.open_item(10).await;

    assert_eq!(
        purchase_settled_while_its_statement_runs(&app, &db, item, 5601).await,
        (200, None),
        "the settle waited for the statement, then found its order"
    );
    assert_eq!(
        (pg_orders(&db, item).await, pg_remaining(&db, item).await),
        (1, 9)
    );
    app.until_nothing_pending(item, "settled by the purchase", Duration::from_secs(2))
        .await;
}

#[sqlx::test]
async fn a_batch_whose_answer_is_late_is_settled_as_failed_once_its_statement_rolls_back(
    db: PgPool,
) {
    commits_wait_at_the_gate(&db, &[5701], true).await;
    let app = spawn_app_with(&db, |s| s.order_commit_timeout_ms = 300).await;
    let item = app.open_item(10).await;

    assert_eq!(
        purchase_settled_while_its_statement_runs(&app, &db, item, 5701).await,
        (503, Some("ORDER_FAILED".into())),
        "the settle waited for the statement, then found no order"
    );
    assert_eq!(
        (pg_orders(&db, item).await, pg_remaining(&db, item).await),
        (0, 10)
    );
    assert_eq!(
        app.redis_command::<Option<i64>>("GET", &app.item_keys(item).stock())
            .await,
        Some(10),
        "the unit is back in Redis"
    );
}
