//! The operator's setup in one place (issue 36, item 5): an item created with its room
//! (one transaction, then Redis, never selling bare in between), and every room change
//! in the item's history, by whom, when, before and after.

use super::*;

/// `POST /admin/api/items` for an item on sale now, named `name`, with `room` as its
/// `waitingRoom` (none when `null`).
async fn create_with_room(app: &TestApp, name: &str, stock: i64, room: Value) -> reqwest::Response {
    let starts_at = Utc::now() - chrono::Duration::minutes(1);
    let mut item = json!({
        "name": name,
        "priceCents": 1999,
        "stock": stock,
        "startsAt": starts_at,
        "endsAt": starts_at + chrono::Duration::hours(1),
    });
    if !room.is_null() {
        item["waitingRoom"] = room;
    }
    app.admin_send(reqwest::Method::POST, "/admin/api/items", Some(item))
        .await
}

/// The item's history, newest first.
async fn history(app: &TestApp, item: i64) -> Vec<Value> {
    let audit = body(
        app.admin_get(&format!("/admin/api/items/{item}/audit"))
            .await,
    )
    .await;
    audit["entries"].as_array().expect("entries").clone()
}

/// Rows of items, item_audit and waiting_rooms in the test's database.
async fn rows(db: &PgPool) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM item_audit), \
         (SELECT count(*) FROM waiting_rooms)",
    )
    .fetch_one(db)
    .await
    .unwrap()
}

/// A room's settings as the history spells them: the defaults with `changes`.
fn settings(changes: Value) -> Value {
    let mut room = json!({
        "enabled": false, "order": "fifo", "prequeueStartsAt": null, "admitPerSecond": 50,
        "maxActive": 500, "passTtlSecs": 120, "abandonAfterSecs": 60, "message": "",
    });
    for (field, value) in changes.as_object().expect("an object") {
        room[field] = value.clone();
    }
    room
}

#[sqlx::test]
async fn every_room_change_is_in_the_items_history_and_a_bad_room_creates_nothing(db: PgPool) {
    let app = spawn_app(&db).await;
    for (room, field) in [
        (
            json!({ "enabled": true, "admitPerSecond": 0 }),
            "waitingRoom.admitPerSecond",
        ),
        (
            json!({ "enabled": true, "order": "lifo" }),
            "waitingRoom.order",
        ),
        (json!({ "passTtlSecs": 5 }), "waitingRoom.passTtlSecs"),
        (json!({ "message": "a\u{7}b" }), "waitingRoom.message"),
        (
            json!({ "prequeueStartsAt": Utc::now() + chrono::Duration::hours(1) }),
            "waitingRoom.prequeueStartsAt",
        ),
    ] {
        let refused = create_with_room(&app, "Refused", 5, room.clone()).await;
        assert_eq!(refused.status(), 400, "{room}");
        let error = body(refused).await;
        assert_eq!(
            (error["code"].as_str(), error["field"].as_str()),
            (Some("VALIDATION_FAILED"), Some(field)),
            "{room}"
        );
    }
    let unknown = create_with_room(&app, "Refused", 5, json!({ "colour": "red" })).await;
    assert_eq!(unknown.status(), 400);
    assert_eq!(body(unknown).await["code"], "VALIDATION_FAILED");
    assert_eq!(rows(&db).await, (0, 0, 0), "nothing written");

    let created = create_with_room(
        &app,
        "Roomed",
        5,
        json!({ "enabled": true, "order": "random", "admitPerSecond": 7, "passTtlSecs": 30 }),
    )
    .await;
    assert_eq!(created.status(), 201);
    let item = body(created).await["id"].as_i64().expect("an id");
    let room = app.get_room(item).await;
    assert_eq!(
        (
            &room["enabled"],
            &room["order"],
            &room["admitPerSecond"],
            &room["version"]
        ),
        (&json!(true), &json!("random"), &json!(7), &json!(1))
    );
    let made = settings(
        json!({ "enabled": true, "order": "random", "admitPerSecond": 7, "passTtlSecs": 30 }),
    );
    let entries = history(&app, item).await;
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["room", "create"]);
    assert_eq!(
        (
            &entries[0]["changedBy"],
            &entries[0]["old"],
            &entries[0]["new"]
        ),
        (&json!("admin"), &settings(json!({})), &made)
    );
    assert_eq!(
        entries[0]["changedAt"], entries[1]["changedAt"],
        "one transaction"
    );

    // A change of rate through the room's own panel: one more entry, before and after.
    let changed = app.set_room(item, json!({ "admitPerSecond": 20 })).await;
    assert_eq!(changed.status(), 200);
    let entries = history(&app, item).await;
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["room", "room", "create"]);
    let mut faster = made.clone();
    faster["admitPerSecond"] = json!(20);
    assert_eq!((&entries[0]["old"], &entries[0]["new"]), (&made, &faster));
    assert!(entries[0]["changedAt"].as_str() > entries[1]["changedAt"].as_str());
    // A refused change is no entry, nor is one that changes no setting (the dashboard's
    // form sends every field): it takes a version, as every edit does.
    let refused = app.set_room(item, json!({ "maxActive": 0 })).await;
    assert_eq!(refused.status(), 400);
    let same = app.set_room(item, faster.clone()).await;
    assert_eq!(same.status(), 200);
    assert_eq!(body(same).await["version"], 3);
    assert_eq!(history(&app, item).await.len(), 3);

    // A room left at its defaults (off) is no room: nothing stored, nothing recorded.
    let plain = create_with_room(&app, "Plain", 5, json!({ "enabled": false })).await;
    assert_eq!(plain.status(), 201);
    let plain = body(plain).await["id"].as_i64().expect("an id");
    assert_eq!(app.get_room(plain).await["version"], 0);
    let entries = history(&app, plain).await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["action"], "create");
}

mod topology {
    use super::*;

    /// The item's room gate in Redis: its version and whether it is on.
    async fn gate(app: &TestApp, item: i64) -> (Option<i64>, Option<String>) {
        redis::cmd("HMGET")
            .arg(app.item_keys(item).room_gate())
            .arg("version")
            .arg("on")
            .query_async(&mut app.redis().await)
            .await
            .unwrap()
    }

    /// Bare purchases of `item` by `users`, all at once: each answer's status and code.
    async fn bare_purchases(
        app: &TestApp,
        item: i64,
        users: std::ops::Range<i64>,
    ) -> Vec<(u16, Value)> {
        let tokens = app.tokens(users).await;
        let purchases = tokens.iter().map(|(user, token)| async move {
            let response = app.post_seckill(token, item, &ip_of(*user)).await;
            (
                response.status().as_u16(),
                body(response).await["code"].clone(),
            )
        });
        futures_util::future::join_all(purchases).await
    }

    fn all_not_admitted(answers: &[(u16, Value)]) -> bool {
        answers
            .iter()
            .all(|(status, code)| *status == 403 && code == "NOT_ADMITTED")
    }

    #[sqlx::test]
    async fn an_item_created_with_its_room_sells_only_through_it_from_its_201(db: PgPool) {
        let app = spawn_app(&db).await;
        let created = create_with_room(&app, "Roomed", 3, json!({ "enabled": true })).await;
        assert_eq!(created.status(), 201);
        let item = body(created).await["id"].as_i64().expect("an id");
        assert_eq!(gate(&app, item).await, (Some(1), Some("1".into())));
        let answers = bare_purchases(&app, item, 500..510).await;
        assert!(all_not_admitted(&answers), "{answers:?}");
        assert_eq!(seckill_test_support::pg_orders(&db, item).await, 0);
        let shopper = joined(&app, 510, item).await;
        let admitted = until_state(&app, &shopper, item, "admitted", Duration::from_secs(5)).await;
        let pass = admitted["pass"].as_str().expect("a pass");
        let bought = app
            .post_seckill_with(&shopper.token, item, &ip_of(510), Some(pass), None)
            .await;
        assert_eq!(bought.status(), 200);
        assert_eq!(seckill_test_support::pg_orders(&db, item).await, 1);
    }

    /// The process stops after the item and its room are committed, before Redis hears
    /// of either (`sale::after_create`): a bare purchase is refused all the same (it
    /// rebuilds the keys from Postgres, gate first), and with no purchase at all the
    /// reconciler's round puts the room in force.
    #[sqlx::test]
    async fn an_item_whose_creation_stopped_before_redis_never_sells_bare(db: PgPool) {
        let _failpoints = seckill_test_support::failpoint_lock().await;
        let app = spawn_app_with(&db, |s| s.reconcile_interval_ms = 200).await;
        let name = format!("stops before redis {}", app.settings.redis_key_prefix);
        fail::cfg("sale::after_create", &format!("return({name})")).unwrap();
        let stopped = create_with_room(&app, &name, 10, json!({ "enabled": true })).await;
        assert_eq!(stopped.status(), 500);
        let untouched = create_with_room(&app, &name, 10, json!({ "enabled": true })).await;
        assert_eq!(untouched.status(), 500);
        fail::remove("sale::after_create");
        let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM items ORDER BY id")
            .fetch_all(&db)
            .await
            .unwrap();
        assert_eq!(
            rows(&db).await,
            (2, 4, 2),
            "both committed, with their rooms"
        );
        let (bought, left) = (ids[0], ids[1]);

        app.until_items_listed(2).await;
        let answers = bare_purchases(&app, bought, 600..610).await;
        assert!(all_not_admitted(&answers), "{answers:?}");
        assert_eq!(gate(&app, bought).await, (Some(1), Some("1".into())));

        eventually(
            "the reconciler puts the room in force",
            Duration::from_secs(10),
            || async {
                let stock: Option<i64> = app.redis_get(&app.item_keys(left).stock()).await;
                (gate(&app, left).await == (Some(1), Some("1".into())) && stock == Some(10))
                    .then_some(())
            },
        )
        .await;
        let answers = bare_purchases(&app, left, 610..615).await;
        assert!(all_not_admitted(&answers), "{answers:?}");
        assert_eq!(seckill_test_support::pg_orders(&db, bought).await, 0);
        assert_eq!(seckill_test_support::pg_orders(&db, left).await, 0);
    }
}
