//! Rules added and removed through the admin API, in force on every instance; shadow
//! rules that count and never refuse; default rules a new release adds reaching an
//! installation made by an older one.

use std::time::Duration;

use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{eventually, json, spawn_app, spawn_app_from, TestApp};

/// `GET /api/limited` as client `id`: its status and `RateLimit-Policy`.
async fn limited(app: &TestApp, id: &str) -> (u16, String) {
    let response = app.limited("", id).await;
    let policy = response
        .headers()
        .get("ratelimit-policy")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (response.status().as_u16(), policy)
}

#[sqlx::test]
async fn a_rule_added_shadowed_enforced_and_removed_on_one_instance_applies_on_the_other(
    db: PgPool,
) {
    let one = spawn_app(&db).await;
    let two = spawn_app_from(one.settings.clone()).await;
    const DEFAULT: &str = r#""client";q=100;w=60, "ip";q=1000;w=60, "network";q=10000;w=60"#;

    // A tighter rule, in shadow: it refuses nothing and is no quota.
    let added = one
        .put_policy(
            "limited",
            json!({ "rules": [{ "name": "tight", "key": "client_id", "windowMs": 60_000,
                               "threshold": 2, "message": "tight says no", "shadow": true }] }),
        )
        .await;
    assert_eq!(added.status(), 200);
    let body = json(added).await;
    assert_eq!(body["rules"][3]["name"], "tight");
    assert_eq!(body["rules"][3]["shadow"], true);
    assert_eq!(body["rules"][3]["key"], "client_id");
    let shadow_series =
        r#"seckill_limiter_shadow_refusals_total{dimension="tight",policy="limited"}"#;
    eventually(
        "the other instance counts the shadow rule",
        Duration::from_secs(10),
        || async {
            for _ in 0..3 {
                let (status, policy) = limited(&two, "shadowed").await;
                assert_eq!(
                    (status, policy.as_str()),
                    (200, DEFAULT),
                    "a shadow never refuses"
                );
            }
            (two.metric_sum(shadow_series).await > 0.0).then_some(())
        },
    )
    .await;

    // Enforced: a quota of its own in RateLimit-Policy, refusing the third call.
    let enforced = one
        .put_policy(
            "limited",
            json!({ "rules": [{ "name": "tight", "shadow": false }] }),
        )
        .await;
    assert_eq!(enforced.status(), 200);
    let both = r#""client";q=100;w=60, "ip";q=1000;w=60, "network";q=10000;w=60, "tight";q=2;w=60"#;
    two.until_policy_served(both).await;
    let statuses: Vec<u16> = [0; 3]
        .iter()
        .map(|_| async { limited(&two, "enforced").await.0 })
        .collect::<futures_util::future::JoinAll<_>>()
        .await;
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, [200, 200, 429], "{statuses:?}");

    // Removed: back to the default three.
    let removed = one
        .put_policy(
            "limited",
            json!({ "rules": [{ "name": "tight", "remove": true }] }),
        )
        .await;
    assert_eq!(removed.status(), 200);
    assert_eq!(json(removed).await["rules"].as_array().unwrap().len(), 3);
    two.until_policy_served(DEFAULT).await;

    let audit: i64 =
        sqlx::query_scalar("SELECT count(*) FROM limiter_policy_audit WHERE policy = 'limited'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(audit, 3, "added, enforced, removed: one audit row each");
}

#[sqlx::test]
async fn rule_set_changes_that_cannot_work_are_refused_and_change_nothing(db: PgPool) {
    let app = spawn_app(&db).await;
    let before = app.policy("limited").await;
    let new = |name: &str, key: serde_json::Value| json!({ "name": name, "key": key, "windowMs": 1000, "threshold": 5, "message": "no" });
    let cases = [
        // `/api/limited` is open to anyone: nothing to key a user rule on.
        (
            "limited",
            json!({ "rules": [new("u", json!("user"))] }),
            "rules[0].key",
        ),
        // The sign-in's script reads its one rule.
        (
            "admin_auth",
            json!({ "rules": [new("more", json!("ip"))] }),
            "rules[0].name",
        ),
        (
            "admin_auth",
            json!({ "rules": [{ "name": "ip", "remove": true }] }),
            "rules[0].name",
        ),
        // A new rule needs every field; a typo of an existing name is one.
        (
            "limited",
            json!({ "rules": [{ "name": "clinet", "threshold": 3 }] }),
            "rules[0].name",
        ),
        (
            "limited",
            json!({ "rules": [{ "name": "new", "key": "ip", "threshold": 3, "message": "no" }] }),
            "rules[0].windowMs",
        ),
        (
            "limited",
            json!({ "rules": [{ "name": "gone", "remove": true }] }),
            "rules[0].name",
        ),
        (
            "limited",
            json!({ "rules": [{ "name": "client", "remove": true, "threshold": 1 }] }),
            "rules[0].remove",
        ),
        // A source changes by removing and adding, never in place.
        (
            "limited",
            json!({ "rules": [{ "name": "client", "key": "ip" }] }),
            "rules[0].key",
        ),
        // Every rule removed, or only shadows left.
        (
            "limited",
            json!({ "rules": [{ "name": "client", "remove": true }, { "name": "ip", "remove": true }, { "name": "network", "remove": true }] }),
            "rules",
        ),
        (
            "limited",
            json!({ "rules": [{ "name": "client", "shadow": true }, { "name": "ip", "shadow": true }, { "name": "network", "shadow": true }] }),
            "rules",
        ),
        // Nine rules.
        (
            "limited",
            json!({ "rules": (1..=8).map(|i| new(&format!("r{i}"), json!("ip"))).collect::<Vec<_>>() }),
            "rules",
        ),
        (
            "limited",
            json!({ "rules": [{ "name": "client", "maxDelayMs": 60_001 }] }),
            "maxDelayMs",
        ),
        (
            "limited",
            json!({ "rules": [new("lit", json!({ "literal": "a b" }))] }),
            "key",
        ),
        // The shaper cannot wait inside the sale's reservation.
        (
            "seckill",
            json!({ "scope": "per_item", "algorithm": "leaky_bucket", "rules": [] }),
            "algorithm",
        ),
    ];
    for (policy, body, field) in cases {
        let response = app.put_policy(policy, body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error = json(response).await;
        assert_eq!(error["code"], "VALIDATION_FAILED", "{body}: {error}");
        assert_eq!(error["field"], field, "{body}: {error}");
    }
    assert_eq!(app.policy("limited").await, before);
    let audit: i64 = sqlx::query_scalar("SELECT count(*) FROM limiter_policy_audit")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(audit, 0);
}

/// The migration that started offering default rules one by one: everything before it
/// is the schema of the release before.
const OFFERED_RULES_MIGRATION: i64 = 20261202000004;

#[sqlx::test(migrations = false)]
async fn an_upgrade_adds_a_new_default_rule_once_and_keeps_what_an_operator_changed(db: PgPool) {
    // The previous release's schema, from the migrations before this one's.
    seckill_test_support::migrate_before(&db, OFFERED_RULES_MIGRATION).await;
    // ...and its rows: `seckill` as that release seeded it (before it had an `ip` rule,
    // for this test), then edited by an operator (the user rule's threshold).
    let mut old = seckill::configuration::policies::defaults()["seckill"].clone();
    old.rules.retain(|rule| rule.name != "ip");
    old.rules[1].threshold = 7;
    sqlx::query("INSERT INTO limiter_policies (name, config, version) VALUES ('seckill', $1, 2)")
        .bind(sqlx::types::Json(&old))
        .execute(&db)
        .await
        .unwrap();

    // This release starts: the migration, then the seeding.
    let app = spawn_app(&db).await;
    let seckill = app.policy("seckill").await;
    let rules: Vec<(&str, u64)> = seckill["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["threshold"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(rules, [("api", 1000), ("user", 7), ("ip", 5)], "{seckill}");
    assert_eq!(seckill["version"], 3);
    let by: Vec<String> =
        sqlx::query_scalar("SELECT changed_by FROM limiter_policy_audit WHERE policy = 'seckill'")
            .fetch_all(&db)
            .await
            .unwrap();
    assert_eq!(by, ["upgrade"]);
    // Policies the old release did not have are seeded whole.
    assert_eq!(app.policy("limited").await["version"], 1);

    // The operator removes the new rule; a restart does not bring it back.
    let removed = app
        .put_policy(
            "seckill",
            json!({ "rules": [{ "name": "ip", "remove": true }] }),
        )
        .await;
    assert_eq!(removed.status(), 200);
    let restarted = spawn_app_from(app.settings.clone()).await;
    let seckill = restarted.policy("seckill").await;
    assert_eq!(seckill["rules"].as_array().unwrap().len(), 2, "{seckill}");
    assert_eq!(seckill["version"], 4, "the restart changed nothing");
}
