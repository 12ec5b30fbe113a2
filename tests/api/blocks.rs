//! The operator's blocks (`/admin/api/blocks`): what they refuse, what they refuse to
//! take, and, in `topology`, that a change holds on every instance from its answer on.

use std::time::Duration;

use reqwest::StatusCode;
use seckill_test_support::{eventually, json, spawn_app_with, TestApp};
use serde_json::{json, Value};
use sqlx::PgPool;

/// A request's status and code.
async fn answer(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    (
        status,
        body["code"].as_str().unwrap_or_default().to_string(),
    )
}

fn blocked() -> (StatusCode, String) {
    (StatusCode::FORBIDDEN, "BLOCKED".to_string())
}

#[sqlx::test]
async fn bad_blocks_are_refused_with_the_field_at_fault(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        s.history.block_max_secs = 600;
        s.history.blocks_max = 2;
        s.trusted_proxies.push("10.9.9.9".parse().unwrap());
    })
    .await;
    let cases = [
        (
            json!({ "kind": "device", "value": "1", "seconds": 60 }),
            "kind",
        ),
        (
            json!({ "kind": "user", "value": "007", "seconds": 60 }),
            "value",
        ),
        (
            json!({ "kind": "ip", "value": "10.0.0.300", "seconds": 60 }),
            "value",
        ),
        (
            json!({ "kind": "ip", "value": "127.0.0.5", "seconds": 60 }),
            "value",
        ),
        (
            json!({ "kind": "ip", "value": "::1", "seconds": 60 }),
            "value",
        ),
        (
            json!({ "kind": "ip", "value": "10.9.9.9", "seconds": 60 }),
            "value",
        ),
        (
            json!({ "kind": "ip", "value": "10.0.0.1", "seconds": 0 }),
            "seconds",
        ),
        (
            json!({ "kind": "ip", "value": "10.0.0.1", "seconds": 601 }),
            "seconds",
        ),
        (
            json!({ "kind": "ip", "value": "10.0.0.1", "seconds": 60, "reason": "a\u{7}" }),
            "reason",
        ),
    ];
    for (body, field) in cases {
        let response = app.post_block(body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error = json(response).await;
        assert_eq!(
            (error["code"].as_str(), error["field"].as_str()),
            (Some("VALIDATION_FAILED"), Some(field)),
            "{body}"
        );
    }
    // The list holds two; a third is refused, the same one again (a new time) is not.
    app.block("ip", "10.0.0.1", 60).await;
    app.block("user", "5", 60).await;
    let third = app
        .post_block(json!({ "kind": "ip", "value": "10.0.0.2", "seconds": 60 }))
        .await;
    assert_eq!(third.status(), 400);
    assert_eq!(json(third).await["field"], "value");
    app.block("ip", "10.0.0.1", 120).await;
    // Lifting what is not blocked, or something no block can name.
    assert_eq!(app.delete_block("ip", "10.0.0.2").await.status(), 404);
    let bad = app.delete_block("device", "1").await;
    assert_eq!(bad.status(), 400);
    assert_eq!(json(bad).await["field"], "kind");
    let listed = json(app.admin_get("/admin/api/blocks").await).await;
    assert_eq!(
        listed["blocks"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
}

mod topology {
    use super::*;

    /// The shopper's routes a blocked caller is refused on, as `token` from `ip`, on
    /// `app`.
    async fn refused_to_shop(app: &TestApp, token: &str, item: i64, ip: &str) {
        assert_eq!(
            answer(app.post_seckill(token, item, ip).await).await,
            blocked(),
            "purchase from {ip}"
        );
        assert_eq!(
            answer(app.join_queue(token, item, ip).await).await,
            blocked(),
            "join from {ip}"
        );
    }

    /// Every route a blocked address is refused on.
    async fn refused_everywhere(app: &TestApp, token: &str, item: i64, ip: &str) {
        refused_to_shop(app, token, item, ip).await;
        assert_eq!(
            answer(app.limited_from(ip).await).await,
            blocked(),
            "/api/limited from {ip}"
        );
    }

    #[sqlx::test]
    async fn a_block_on_one_instance_holds_on_the_other_from_its_answer_on_and_an_unblock_there_lifts_it(
        db: PgPool,
    ) {
        let first = spawn_app_with(&db, |_| {}).await;
        let second = seckill_test_support::spawn_app_from(first.settings.clone()).await;
        // Both beat into the heartbeat set at start: both must confirm.
        eventually("both instances beat", Duration::from_secs(5), || async {
            let beats: i64 = first
                .redis_command(
                    "ZCARD",
                    &format!("{}:limiter:instances", first.settings.redis_key_prefix),
                )
                .await;
            (beats == 2).then_some(())
        })
        .await;
        let item = first.open_item(100).await;
        second.until_items_listed(1).await;
        let token = second.token_for(11).await;

        // IPv4: blocked on the first, refused on the second at once.
        first.block("ip", "203.0.113.9", 600).await;
        refused_everywhere(&second, &token, item, "203.0.113.9").await;
        // IPv6: the whole /64, named by any of its addresses.
        first.block("ip", "2001:db8:7:7::1", 600).await;
        refused_everywhere(&second, &token, item, "2001:db8:7:7:ffff::2").await;
        assert_eq!(second.limited_from("2001:db8:7:8::1").await.status(), 200);

        // Lifted on the second, by its listed form: the first serves it at once.
        let listed = json(second.admin_get("/admin/api/blocks").await).await;
        assert!(
            listed["blocks"]
                .as_array()
                .is_some_and(|b| b.iter().any(|b| b["value"] == "2001:db8:7:7::/64")),
            "{listed}"
        );
        let lifted = second.delete_block("ip", "2001:db8:7:7::/64").await;
        assert_eq!(lifted.status(), 200);
        assert_eq!(json(lifted).await["unconfirmed"], json!([]));
        assert_eq!(
            first
                .post_seckill(&token, item, "2001:db8:7:7::3")
                .await
                .status(),
            200
        );

        // A user: refused on the other instance's routes, whatever the address; the poll too.
        second.block("user", "12", 600).await;
        let twelve = first.token_for(12).await;
        refused_to_shop(&first, &twelve, item, "198.51.100.12").await;
        assert_eq!(
            answer(first.poll_queue(&twelve, item, "no-ticket").await).await,
            blocked()
        );
        assert_eq!(
            answer(first.my_orders(&twelve, None).await).await,
            blocked()
        );

        // Counted where refused, by policy; the audit holds every change, by its operator.
        assert!(
            second
                .metric_sum(r#"seckill_blocked_total{policy="seckill"}"#)
                .await
                >= 2.0
        );
        assert!(
            first
                .metric_sum(r#"seckill_blocked_total{policy="queue_poll"}"#)
                .await
                >= 1.0
        );
        let audit = json(first.admin_get("/admin/api/blocks").await).await["audit"].clone();
        let actions: Vec<(String, String)> = audit
            .as_array()
            .expect("an audit")
            .iter()
            .map(|a| {
                (
                    a["action"].as_str().unwrap_or_default().into(),
                    a["value"].as_str().unwrap_or_default().into(),
                )
            })
            .collect();
        let changes = |a: &str, v: &str| (a.to_string(), v.to_string());
        assert_eq!(
            actions,
            vec![
                changes("block", "12"),
                changes("unblock", "2001:db8:7:7::/64"),
                changes("block", "2001:db8:7:7::/64"),
                changes("block", "203.0.113.9"),
            ]
        );
        assert!(
            audit
                .as_array()
                .unwrap()
                .iter()
                .all(|a| a["changedBy"] == "admin"),
            "{audit}"
        );
    }

    #[sqlx::test]
    async fn blocks_sent_at_once_to_two_instances_each_hold_on_both_from_their_answer_on(
        db: PgPool,
    ) {
        let first = spawn_app_with(&db, |_| {}).await;
        let second = seckill_test_support::spawn_app_from(first.settings.clone()).await;
        // Eight operators at once, half on each instance: the changes' versions follow
        // their commits, so none is confirmed before the rows it names are read.
        let addresses: Vec<String> = (1..=8).map(|n| format!("192.0.2.{n}")).collect();
        let (first, second) = (&first, &second);
        let answers = futures_util::future::join_all(addresses.iter().enumerate().map(|(n, ip)| {
            let app = if n % 2 == 0 { &first } else { &second };
            async move {
                let response = app
                    .post_block(json!({ "kind": "ip", "value": ip, "seconds": 600, "reason": "at once" }))
                    .await;
                let status = response.status();
                let body = json(response).await;
                // Checked on both instances as soon as its own answer came.
                let on_first = first.limited_from(ip).await.status();
                let on_second = second.limited_from(ip).await.status();
                (status, body["unconfirmed"].clone(), on_first, on_second)
            }
        }))
        .await;
        for (ip, answer) in addresses.iter().zip(answers) {
            assert_eq!(
                answer,
                (
                    StatusCode::CREATED,
                    json!([]),
                    StatusCode::FORBIDDEN,
                    StatusCode::FORBIDDEN
                ),
                "{ip}"
            );
        }
        let listed = json(first.admin_get("/admin/api/blocks").await).await;
        assert_eq!(listed["blocks"].as_array().map(Vec::len), Some(8));
        let versions: std::collections::BTreeSet<i64> = listed["audit"]
            .as_array()
            .expect("an audit")
            .iter()
            .filter_map(|a| a["id"].as_i64())
            .collect();
        assert_eq!(versions.len(), 8);
    }

    #[sqlx::test]
    async fn a_block_lifts_at_its_end_on_every_instance(db: PgPool) {
        let first = spawn_app_with(&db, |_| {}).await;
        let second = seckill_test_support::spawn_app_from(first.settings.clone()).await;
        let set = first.block("ip", "192.0.2.44", 2).await;
        let until: chrono::DateTime<chrono::Utc> =
            serde_json::from_value(set["block"]["until"].clone()).expect("an end");
        let refused = second.limited_from("192.0.2.44").await.status();
        // Refused while in force (asked early enough to tell on a loaded machine)...
        if chrono::Utc::now() < until - chrono::Duration::milliseconds(500) {
            assert_eq!(refused, 403);
        }
        // ...and served after its end, on every instance: polled, no sleep.
        eventually("the block lifts", Duration::from_secs(10), || async {
            (second.limited_from("192.0.2.44").await.status() == 200).then_some(())
        })
        .await;
        assert!(chrono::Utc::now() >= until);
        assert_eq!(first.limited_from("192.0.2.44").await.status(), 200);
        let listed = json(first.admin_get("/admin/api/blocks").await).await;
        assert_eq!(listed["blocks"], json!([]));
    }
}
