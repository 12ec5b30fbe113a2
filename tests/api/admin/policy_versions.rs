//! No policy edit is lost silently: each policy has a version, served as its entity
//! tag; an edit made from an older one is refused (409 `VERSION_CONFLICT`), and edits
//! of different rules made at once all stand.

use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{json, spawn_app};

fn etag(response: &reqwest::Response) -> Option<&str> {
    response.headers().get("etag")?.to_str().ok()
}

#[sqlx::test]
async fn one_policy_is_served_with_its_version_as_an_etag(db: PgPool) {
    let app = spawn_app(&db).await;
    let listed = json(app.admin_get("/admin/api/policies").await).await;
    for policy in listed["policies"].as_array().unwrap() {
        assert_eq!(policy["version"], 1, "{policy}");
    }

    let one = app.admin_get("/admin/api/policies/limited").await;
    assert_eq!((one.status().as_u16(), etag(&one)), (200, Some(r#""1""#)));
    let body = json(one).await;
    assert_eq!(
        (&body["name"], &body["version"]),
        (&json!("limited"), &json!(1))
    );
    assert_eq!(body["rules"][0]["threshold"], 100);

    let changed = app
        .put_policy(
            "limited",
            json!({ "rules": [{ "name": "client", "threshold": 7 }] }),
        )
        .await;
    assert_eq!(
        (changed.status().as_u16(), etag(&changed)),
        (200, Some(r#""2""#))
    );
    assert_eq!(json(changed).await["version"], 2);
    let one = app.admin_get("/admin/api/policies/limited").await;
    assert_eq!(etag(&one), Some(r#""2""#));
    assert_eq!(app.listed_policy("limited").await["version"], 2);
    assert_eq!(app.listed_policy("seckill").await["version"], 1);

    let missing = app.admin_get("/admin/api/policies/no_such_policy").await;
    assert_eq!(missing.status(), 404);
    assert_eq!(json(missing).await["code"], "NOT_FOUND");
}

/// Two operators edit the same loaded policy at once: one edit stands, the other is
/// refused with the version it missed, instead of silently overwriting (or being
/// merged into) a change its author never saw.
#[sqlx::test]
async fn two_edits_of_the_same_loaded_version_one_stands_one_conflicts(db: PgPool) {
    let app = spawn_app(&db).await;
    for round in 1..=5u64 {
        let loaded = app.listed_policy("seckill").await["version"]
            .as_u64()
            .unwrap();
        assert_eq!(loaded, round, "one bump per round");
        let edits = [("user", 10 + round), ("ip", 20 + round)];
        let responses = futures_util::future::join_all(edits.iter().map(|(rule, threshold)| {
            app.put_policy(
                "seckill",
                json!({ "version": loaded, "rules": [{ "name": rule, "threshold": threshold }] }),
            )
        }))
        .await;
        let mut statuses: Vec<u16> = responses.iter().map(|r| r.status().as_u16()).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "round {round}");
        for response in responses {
            if response.status() == 409 {
                let error = json(response).await;
                assert_eq!(error["code"], "VERSION_CONFLICT", "round {round}");
                assert_eq!(error["currentVersion"], loaded + 1, "round {round}");
            }
        }
        let seckill = app.listed_policy("seckill").await;
        assert_eq!(seckill["version"], loaded + 1, "round {round}");
        let kept = edits
            .iter()
            .filter(|(rule, threshold)| {
                seckill["rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["name"] == *rule && r["threshold"] == *threshold)
            })
            .count();
        assert_eq!(kept, 1, "round {round}: exactly the winning edit is stored");
    }
    let audited: i64 = sqlx::query_scalar("SELECT count(*) FROM limiter_policy_audit")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(audited, 5);
}

#[sqlx::test]
async fn a_stale_if_match_conflicts_and_an_edit_without_a_version_still_stands(db: PgPool) {
    let app = spawn_app(&db).await;
    let edit = |threshold: u64| json!({ "rules": [{ "name": "client", "threshold": threshold }] });

    let first = app.put_policy_if_match("limited", r#""1""#, edit(7)).await;
    assert_eq!(
        (first.status().as_u16(), etag(&first)),
        (200, Some(r#""2""#))
    );

    let stale = app.put_policy_if_match("limited", r#""1""#, edit(8)).await;
    assert_eq!(stale.status(), 409);
    let error = json(stale).await;
    assert_eq!(
        (&error["code"], &error["currentVersion"]),
        (&json!("VERSION_CONFLICT"), &json!(2))
    );
    let stale_body = app
        .put_policy("limited", json!({ "version": 1, "rules": [] }))
        .await;
    assert_eq!(stale_body.status(), 409);

    let unconditional = app.put_policy("limited", edit(9)).await;
    assert_eq!(
        (unconditional.status().as_u16(), etag(&unconditional)),
        (200, Some(r#""3""#))
    );
    let current = app.put_policy_if_match("limited", r#""3""#, edit(10)).await;
    assert_eq!(current.status(), 200);
    let stored = app.listed_policy("limited").await;
    assert_eq!(
        (&stored["version"], &stored["rules"][0]["threshold"]),
        (&json!(4), &json!(10))
    );

    // A precondition that is not one of our entity tags is a client error, not a guess.
    for bad in ["3", r#"W/"4""#, r#""4", "5""#] {
        let response = app.put_policy_if_match("limited", bad, edit(11)).await;
        assert_eq!(response.status(), 400, "{bad}");
        assert_eq!(json(response).await["field"], "If-Match", "{bad}");
    }
    let disagreeing = app
        .put_policy_if_match("limited", r#""4""#, json!({ "version": 3, "rules": [] }))
        .await;
    assert_eq!(disagreeing.status(), 400);
    assert_eq!(app.listed_policy("limited").await["version"], 4);
}

/// Concurrent edits of different rules of one policy all stand: each is a
/// read-modify-write of the stored policy under its row lock, never a merge into a copy
/// read before another edit committed.
#[sqlx::test]
async fn concurrent_edits_of_one_policy_are_all_kept(db: PgPool) {
    let app = spawn_app(&db).await;
    for round in 1..=8u64 {
        let edits = [
            ("api", 1_000 + round),
            ("user", 3 + round),
            ("ip", 5 + round),
        ];
        let responses = futures_util::future::join_all(edits.iter().map(|(rule, threshold)| {
            app.put_policy(
                "seckill",
                json!({ "rules": [{ "name": rule, "threshold": threshold }] }),
            )
        }))
        .await;
        for response in responses {
            assert_eq!(response.status(), 200, "round {round}");
        }
        let seckill = app.listed_policy("seckill").await;
        for (rule, threshold) in edits {
            let found = seckill["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == rule)
                .unwrap();
            assert_eq!(found["threshold"], threshold, "round {round}: {rule} lost");
        }
    }
}
