//! Key sources per policy: a rule may key only on what its policy's routes supply
//! (`configuration::policies::KEY_SOURCES`), and every source a policy lists is
//! supplied by its routes, the route's pattern from the router itself.

use seckill::configuration::policies::{
    self, ADMIN_AUTH_POLICY, KEY_SOURCES, LIMITED_POLICY, ORDERS_READ_POLICY, QUEUE_JOIN_POLICY,
    SECKILL_POLICY,
};
use seckill::limiter::policy::{KeySource, PolicyConfig, RuleConfig};
use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{json, spawn_app, spawn_app_with};

/// A new rule named `name`, keyed on `key`, for a policy edit.
fn new_rule(name: &str, key: serde_json::Value) -> serde_json::Value {
    json!({ "rules": [{ "name": name, "key": key, "windowMs": 60_000,
                        "threshold": 5, "message": "slow down" }] })
}

#[sqlx::test]
async fn a_rule_keyed_on_a_source_its_policys_routes_do_not_supply_is_refused_naming_the_field(
    db: PgPool,
) {
    let app = spawn_app(&db).await;
    for policy in ["seckill", "orders_read", "queue_join"] {
        let response = app
            .put_policy(policy, new_rule("device", json!("client_id")))
            .await;
        assert_eq!(response.status(), 400, "{policy}");
        let error = json(response).await;
        assert_eq!(error["code"], "VALIDATION_FAILED", "{policy}: {error}");
        assert_eq!(error["field"], "rules[0].key", "{policy}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("client_id") && message.contains(policy),
            "{policy}: {message}"
        );
        assert_eq!(
            app.policy(policy).await["version"],
            1,
            "{policy}: nothing stored"
        );
    }
    // The source a route does supply is taken, on `/api/limited` as everywhere.
    for (policy, key) in [
        ("limited", json!("client_id")),
        ("seckill", json!("network")),
        ("seckill", json!("route")),
        ("orders_read", json!({ "literal": "reads" })),
    ] {
        let name = format!("extra_{}", key.as_str().unwrap_or("literal"));
        let response = app.put_policy(policy, new_rule(&name, key.clone())).await;
        assert_eq!(response.status(), 200, "{policy} {key}");
    }
}

/// Every source a policy's row lists is one its route supplies: with a rule on each,
/// each route answers (no `LIMITER` misconfiguration, no 500), and a `route` rule counts
/// under the router's pattern, which is the string each route spelled by hand before.
#[sqlx::test]
async fn every_source_a_policys_row_lists_is_supplied_by_its_route(db: PgPool) {
    // Ten in ten minutes: nothing is refused, and a token bucket's key (which lives
    // until the bucket is full again) outlives the test.
    let app = spawn_app_with(&db, |settings| {
        for (name, sources) in KEY_SOURCES {
            if name == ADMIN_AUTH_POLICY {
                continue; // its script reads its one rule, per address
            }
            let policy = settings.limiter.policies.get_mut(name).expect(name);
            for source in sources {
                let key = match source {
                    KeySource::Literal(_) => KeySource::Literal("all".into()),
                    other => other.clone(),
                };
                let rule = format!("every_{}", source.as_str());
                policy
                    .rules
                    .push(RuleConfig::new(&rule, key, 600_000, 10, "plenty"));
            }
        }
    })
    .await;
    let item = app.open_item(10).await;
    let token = app.token_for(1).await;
    assert_eq!(
        app.post_seckill(&token, item, "10.0.0.1").await.status(),
        200
    );
    assert_eq!(app.my_orders(&token, None).await.status(), 200);
    let joined = app.join_queue(&token, item, "10.0.0.1").await;
    assert!(!joined.status().is_server_error(), "{}", joined.status());
    assert_eq!(app.limited("", "any-client").await.status(), 200);
    assert_eq!(app.get("/api/limited").await.status(), 200, "no client id");

    let prefix = &app.settings.redis_key_prefix;
    for (policy, pattern) in [
        (SECKILL_POLICY, "/seckill"),
        (ORDERS_READ_POLICY, "/api/orders/mine"),
        (QUEUE_JOIN_POLICY, "/api/items/{id}/queue"),
        (LIMITED_POLICY, "/api/limited"),
    ] {
        let keys = app
            .keys_matching(&format!("{prefix}:{{{policy}}}:*:every_route:*"))
            .await;
        let routes: Vec<_> = keys
            .iter()
            .map(|key| &key[key.find(":every_route:").unwrap() + 13..])
            .collect();
        assert_eq!(routes, [pattern], "{policy}: {keys:?}");
    }
}

/// The migration before this issue's: everything before it is the previous release's
/// schema.
const KEY_SOURCES_MIGRATION: i64 = 20261204000002;

#[sqlx::test(migrations = false)]
async fn a_stored_rule_on_an_unsupplied_source_is_rewritten_to_ip_with_an_audit_row(db: PgPool) {
    // The previous release's schema, from the migrations before this one's.
    seckill_test_support::migrate_before(&db, KEY_SOURCES_MIGRATION).await;
    // As the previous release let an operator store them: a `client_id` rule on the
    // sale (it counted per address), the lockout's rule on the network (per address
    // too), and `limited`'s own `client_id` rule, which its route supplies.
    let mut stored = policies::defaults();
    let device = RuleConfig::new("device", KeySource::ClientId, 60_000, 2, "one device");
    stored
        .get_mut(SECKILL_POLICY)
        .unwrap()
        .rules
        .push(device.clone());
    stored.get_mut(ADMIN_AUTH_POLICY).unwrap().rules[0].key = KeySource::Network;
    for name in [SECKILL_POLICY, ADMIN_AUTH_POLICY, LIMITED_POLICY] {
        let offered: Vec<String> = stored[name].rules.iter().map(|r| r.name.clone()).collect();
        sqlx::query(
            "INSERT INTO limiter_policies (name, config, offered_rules) VALUES ($1, $2, $3)",
        )
        .bind(name)
        .bind(sqlx::types::Json(&stored[name]))
        .bind(&offered)
        .execute(&db)
        .await
        .unwrap();
    }

    // This release starts: the migration, then the seeding.
    let app = spawn_app(&db).await;
    let seckill = app.policy(SECKILL_POLICY).await;
    assert_eq!(seckill["version"], 2);
    assert_eq!(seckill["rules"][3]["name"], "device");
    assert_eq!(seckill["rules"][3]["key"], "ip", "{seckill}");
    assert_eq!(seckill["rules"][3]["threshold"], 2);
    let admin_auth = app.policy(ADMIN_AUTH_POLICY).await;
    assert_eq!(admin_auth["version"], 2);
    assert_eq!(admin_auth["rules"][0]["key"], "ip", "{admin_auth}");
    assert_eq!(app.policy(LIMITED_POLICY).await["version"], 1, "untouched");
    let audit: Vec<(String, String, String, String)> = sqlx::query_as(
        "SELECT policy, changed_by, old_config::text, new_config::text FROM limiter_policy_audit ORDER BY policy",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    let audited: Vec<(&str, &str)> = audit
        .iter()
        .map(|(p, by, _, _)| (p.as_str(), by.as_str()))
        .collect();
    assert_eq!(
        audited,
        [(ADMIN_AUTH_POLICY, "upgrade"), (SECKILL_POLICY, "upgrade")]
    );
    let (_, _, old, new) = &audit[1];
    let (old, new): (PolicyConfig, PolicyConfig) = (
        serde_json::from_str(old).unwrap(),
        serde_json::from_str(new).unwrap(),
    );
    assert_eq!(old, stored[SECKILL_POLICY]);
    assert_eq!(
        new.rules[3],
        RuleConfig {
            key: KeySource::Ip,
            ..device
        }
    );
}
