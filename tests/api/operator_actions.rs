//! Issue 33: an operator's action holds on every instance from its 200 on (the commit
//! refuses what the item's row refuses, whatever an instance's copy of the catalog
//! says), and an operator's end is final.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;

use seckill_test_support::{
    eventually, failpoint_lock, ip_of, json as body, pg_orders, spawn_app, spawn_app_from,
    until_redis_agrees_with_postgres, TestApp,
};

/// `TestApp::create_item`'s price, and the one a price edit sets.
const OLD_PRICE: i64 = 1999;
const NEW_PRICE: i64 = 999_999;

/// An operator's action that a purchase on another instance may race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    End,
    Archive,
    Pause,
    Reprice,
}

impl Action {
    const ALL: [Action; 4] = [Action::End, Action::Archive, Action::Pause, Action::Reprice];

    async fn apply(self, app: &TestApp, item: i64) -> reqwest::Response {
        let post = |verb: &str| format!("/admin/api/items/{item}/{verb}");
        match self {
            Action::End => app.admin_send(Method::POST, &post("end"), None).await,
            Action::Archive => app.admin_send(Method::POST, &post("archive"), None).await,
            Action::Pause => app.admin_send(Method::POST, &post("pause"), None).await,
            Action::Reprice => {
                app.patch_item(item, json!({ "priceCents": NEW_PRICE }))
                    .await
            }
        }
    }

    /// The code of a purchase refused because of it.
    fn refusal(self) -> &'static str {
        match self {
            Action::End | Action::Archive => "SALE_ENDED",
            Action::Pause => "SALE_PAUSED",
            Action::Reprice => "PRICE_CHANGED",
        }
    }
}

/// How many of the item's orders were bought at `price`.
async fn orders_at(db: &PgPool, item: i64, price: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM orders WHERE item_id = $1 AND price_cents = $2")
        .bind(item)
        .bind(price)
        .fetch_one(db)
        .await
        .unwrap()
}

/// The item's orders placed at or after its end.
async fn orders_after_the_end(db: &PgPool, item: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM orders o JOIN items i ON i.id = o.item_id \
         WHERE o.item_id = $1 AND o.created_at >= i.ends_at",
    )
    .bind(item)
    .fetch_one(db)
    .await
    .unwrap()
}

#[sqlx::test]
async fn an_operators_end_is_final_an_edit_of_its_end_is_refused(db: PgPool) {
    let app = spawn_app(&db).await;
    let item = app.open_item(5).await;
    let ended = Action::End.apply(&app, item).await;
    assert_eq!(ended.status(), 200);
    let ends_at = body(ended).await["endsAt"].clone();
    let an_hour_ahead = chrono::Utc::now() + chrono::Duration::hours(1);
    let reopened = app
        .patch_item(item, json!({ "endsAt": an_hour_ahead }))
        .await;
    let status = reopened.status().as_u16();
    let answer = body(reopened).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("ENDED_BY_OPERATOR")),
        "{answer}"
    );
    // Its other fields may still be edited; the end stays where the operator put it.
    let renamed = app.patch_item(item, json!({ "name": "Renamed" })).await;
    assert_eq!(renamed.status(), 200);
    assert_eq!(body(renamed).await["endsAt"], ends_at);
    let token = app.token_for(1).await;
    let bought = app.post_seckill(&token, item, &ip_of(1)).await;
    assert_eq!(bought.status(), 409);
    assert_eq!(body(bought).await["code"], "SALE_ENDED");
    assert_eq!(pg_orders(&db, item).await, 0);
    assert_eq!(app.audit_actions(item).await, ["edit", "end", "create"]);
}

#[sqlx::test]
async fn a_sale_that_ended_on_its_own_may_still_be_extended(db: PgPool) {
    let app = spawn_app(&db).await;
    let item = app.open_item(5).await;
    // Its end reached, behind the back of the instance's copy of the catalog.
    sqlx::query("UPDATE items SET ends_at = now() - interval '1 second' WHERE id = $1")
        .bind(item)
        .execute(&db)
        .await
        .unwrap();
    let token = app.token_for(1).await;
    let late = app.post_seckill(&token, item, &ip_of(1)).await;
    assert_eq!(late.status(), 409);
    assert_eq!(body(late).await["code"], "SALE_ENDED");
    let an_hour_ahead = chrono::Utc::now() + chrono::Duration::hours(1);
    let extended = app
        .patch_item(item, json!({ "endsAt": an_hour_ahead }))
        .await;
    assert_eq!(extended.status(), 200);
    let token = app.token_for(2).await;
    let bought = app.post_seckill(&token, item, &ip_of(2)).await;
    assert_eq!(bought.status(), 200);
    assert_eq!(pg_orders(&db, item).await, 1);
}

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

    /// Batches the committer has taken so far.
    async fn batches(app: &TestApp) -> f64 {
        app.metric_sum("seckill_commit_batch_size_count").await
    }

    /// A purchase on B held in B's committer (failpoint `committer::stall`) while the
    /// operator acts on A, then let go: the commit refuses it for what the row says
    /// now, and its unit comes back to both stores.
    #[sqlx::test]
    async fn a_purchase_held_at_the_commit_across_an_operators_action_is_refused_and_gives_its_unit_back(
        db: PgPool,
    ) {
        let one = spawn_app(&db).await;
        let two = spawn_app_from(one.settings.clone()).await;
        let mut items = Vec::new();
        for _ in Action::ALL {
            items.push(one.open_item(10).await);
        }
        two.until_items_listed(items.len()).await;
        let _failpoints = failpoint_lock().await;
        let mut answers = Vec::new();
        for (n, (action, item)) in Action::ALL
            .into_iter()
            .zip(items.iter().copied())
            .enumerate()
        {
            let user = 9_000 + n as i64;
            let token = two.token_for(user).await;
            let before = batches(&two).await;
            fail::cfg("committer::stall", &format!("return({user})")).unwrap();
            let ip = ip_of(user);
            let purchase = two.post_seckill(&token, item, &ip);
            let act = async {
                eventually(
                    "the purchase waits in the committer",
                    Duration::from_secs(10),
                    || async { (batches(&two).await > before).then_some(()) },
                )
                .await;
                let acted = action.apply(&one, item).await;
                fail::remove("committer::stall");
                acted.status().as_u16()
            };
            let (response, acted) = tokio::join!(purchase, act);
            assert_eq!(acted, 200, "{action:?}");
            let status = response.status().as_u16();
            let answer = body(response).await;
            answers.push((action, status, answer));
        }
        let summary: Vec<String> = answers
            .iter()
            .map(|(action, status, answer)| format!("{action:?}: {status} {answer}"))
            .collect();
        for (action, status, answer) in &answers {
            assert_eq!(
                (*status, answer["code"].as_str()),
                (409, Some(action.refusal())),
                "{summary:#?}"
            );
        }
        let repriced = &answers[3].2;
        assert_eq!(repriced["priceCents"], NEW_PRICE, "{repriced}");
        let mut conn = two.redis().await;
        for (n, item) in items.into_iter().enumerate() {
            let (settled, _) =
                until_redis_agrees_with_postgres(&two, &db, item, Duration::from_secs(10)).await;
            assert_eq!(settled, (0, 10), "item {item}: no order, every unit back");
            // The buyer's mark and the order's entry are gone with it.
            let keys = two.item_keys(item);
            let marked: i64 = redis::cmd("SISMEMBER")
                .arg(keys.buyers())
                .arg(9_000 + n as i64)
                .query_async(&mut conn)
                .await
                .unwrap();
            let held: i64 = redis::cmd("HLEN")
                .arg(keys.orders())
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!((marked, held), (0, 0), "item {item}");
        }
    }

    /// An operator's change is announced on the sale's channel (what wakes every
    /// instance's reload, `SoldOut::announce_change`): an item's pause, end and edit,
    /// and its waiting room's edit, each as `<item id>:changed`.
    #[sqlx::test]
    async fn an_operators_changes_are_announced_on_the_sales_channel(db: PgPool) {
        use futures_util::StreamExt;
        let app = spawn_app(&db).await;
        let item = app.open_item(10).await;
        let nodes = std::env::var("SECKILL_REDIS_CLUSTER_NODES").unwrap_or_default();
        let url = match nodes.split(',').find(|n| !n.is_empty()) {
            Some(node) => node.to_string(),
            None => std::env::var("REDIS_URL").unwrap(),
        };
        let mut pubsub = redis::Client::open(url)
            .unwrap()
            .get_async_pubsub()
            .await
            .unwrap();
        pubsub
            .subscribe(format!("{}:sold-out", app.settings.redis_key_prefix))
            .await
            .unwrap();
        let mut messages = pubsub.on_message();
        let changes = [
            Action::Pause.apply(&app, item).await.status().as_u16(),
            app.set_room(item, json!({ "enabled": true }))
                .await
                .status()
                .as_u16(),
            Action::Reprice.apply(&app, item).await.status().as_u16(),
            Action::End.apply(&app, item).await.status().as_u16(),
        ];
        assert_eq!(changes, [200; 4]);
        let mut heard = Vec::new();
        while heard.len() < changes.len() {
            let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
                .await
                .expect("a message within 10 s")
                .expect("the subscription lasts");
            heard.push(message.get_payload::<String>().unwrap());
        }
        assert_eq!(heard, vec![format!("{item}:changed"); 4]);
    }

    /// What one race saw.
    #[derive(Debug)]
    struct Race {
        action: Action,
        /// Purchases sent after the operator's 200, and how many of them sold.
        sent_after: usize,
        sold_after: usize,
        /// Orders (at the old price, for a price edit) when the 200 came, and at the end.
        orders_at_200: i64,
        orders_at_last: i64,
        /// 200s, and the item's orders in Postgres.
        sold: i64,
        orders: i64,
        /// Orders placed at or after the item's end.
        after_the_end: i64,
        /// Answers that were neither a sale nor the action's refusal.
        unexpected: Vec<String>,
    }

    /// Purchases before the action, and after its 200.
    const BEFORE: usize = 40;
    const AFTER: usize = 16;
    /// Purchases in flight at once.
    const LANES: usize = 8;

    /// Buyers (a fresh user and address each) on `two` while the operator acts on
    /// `one` once the first has sold.
    async fn race(
        one: &TestApp,
        two: &TestApp,
        db: &PgPool,
        action: Action,
        item: i64,
        first_user: i64,
    ) -> Race {
        let users: Vec<i64> = (first_user..first_user + (BEFORE + AFTER) as i64).collect();
        let tokens = two.tokens(users.iter().copied()).await;
        let next = AtomicUsize::new(0);
        let sold_before = AtomicUsize::new(0);
        let (acted_tx, acted_rx) = tokio::sync::watch::channel(false);
        let lanes = (0..LANES).map(|_| {
            let mut acted_rx = acted_rx.clone();
            let (tokens, next, sold_before) = (&tokens, &next, &sold_before);
            async move {
                let mut answers = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    let Some((user, token)) = tokens.get(n) else {
                        break;
                    };
                    if n >= BEFORE {
                        let _ = acted_rx.wait_for(|acted| *acted).await;
                    }
                    let after = *acted_rx.borrow();
                    let response = two.post_seckill(token, item, &ip_of(*user)).await;
                    let status = response.status().as_u16();
                    let answer: Value = response.json().await.unwrap_or(Value::Null);
                    if status == 200 && !after {
                        sold_before.fetch_add(1, Ordering::SeqCst);
                    }
                    answers.push((after, status, answer));
                }
                answers
            }
        });
        let operator = async {
            eventually("a purchase sold on B", Duration::from_secs(10), || async {
                (sold_before.load(Ordering::SeqCst) > 0).then_some(())
            })
            .await;
            let acted = action.apply(one, item).await;
            assert_eq!(acted.status(), 200, "{action:?}");
            let at_200 = match action {
                Action::Reprice => orders_at(db, item, OLD_PRICE).await,
                _ => pg_orders(db, item).await,
            };
            acted_tx.send_replace(true);
            at_200
        };
        let (answers, orders_at_200) =
            tokio::join!(futures_util::future::join_all(lanes), operator);
        let answers: Vec<_> = answers.into_iter().flatten().collect();
        two.until_nothing_pending(item, "purchases settled", Duration::from_secs(10))
            .await;
        let orders_at_last = match action {
            Action::Reprice => orders_at(db, item, OLD_PRICE).await,
            _ => pg_orders(db, item).await,
        };
        let unexpected = answers
            .iter()
            .filter(|(_, status, answer)| {
                *status != 200 && !(*status == 409 && answer["code"] == action.refusal())
            })
            .map(|(_, status, answer)| format!("{status} {answer}"))
            .collect();
        Race {
            action,
            sent_after: answers.iter().filter(|(after, _, _)| *after).count(),
            sold_after: answers
                .iter()
                .filter(|(after, status, _)| *after && *status == 200)
                .count(),
            orders_at_200,
            orders_at_last,
            sold: answers
                .iter()
                .filter(|(_, status, _)| *status == 200)
                .count() as i64,
            orders: pg_orders(db, item).await,
            after_the_end: orders_after_the_end(db, item).await,
            unexpected,
        }
    }

    /// The audit's reproduction: the operator ends, archives, pauses or reprices an item
    /// on A while purchases race it on B. From the 200 on, B sells nothing more (at the
    /// old price, for a price edit); every 200 is an order; refused units are back.
    #[sqlx::test]
    async fn purchases_on_another_instance_racing_an_operators_action_sell_nothing_after_its_200(
        db: PgPool,
    ) {
        let one = spawn_app(&db).await;
        let two = spawn_app_from(one.settings.clone()).await;
        let stock = 100;
        let mut items = Vec::new();
        for _ in Action::ALL {
            items.push(one.open_item(stock).await);
        }
        two.until_items_listed(items.len()).await;
        let races = futures_util::future::join_all(
            Action::ALL
                .into_iter()
                .zip(items.iter().copied())
                .enumerate()
                .map(|(n, (action, item))| {
                    race(
                        &one,
                        &two,
                        &db,
                        action,
                        item,
                        1 + (n * (BEFORE + AFTER)) as i64,
                    )
                }),
        )
        .await;
        for race in &races {
            let context = format!("{races:#?}");
            assert!(race.unexpected.is_empty(), "{context}");
            assert_eq!(race.sold, race.orders, "every 200 is an order: {context}");
            assert_eq!(race.after_the_end, 0, "{context}");
            assert_eq!(race.orders_at_last, race.orders_at_200, "{context}");
            assert!(race.sent_after >= AFTER, "{context}");
            if race.action != Action::Reprice {
                assert_eq!(race.sold_after, 0, "{context}");
            }
        }
        for item in items {
            let (settled, _) =
                until_redis_agrees_with_postgres(&two, &db, item, Duration::from_secs(10)).await;
            assert_eq!(
                settled.0 + settled.1,
                stock,
                "item {item}: sold and left add up"
            );
        }
    }
}
