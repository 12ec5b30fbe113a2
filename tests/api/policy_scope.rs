//! Policy scopes: a `per_item` `seckill` policy counts each sale on its own, under the
//! item's own hash tag (so its keys share the slot of the item's stock), and only the
//! sale's policy may be `per_item`.

use std::collections::BTreeMap;
use std::time::Duration;

use seckill::configuration::policies::{LIMITED_POLICY, SECKILL_POLICY};
use seckill::configuration::Settings;
use seckill::limiter::policy::PolicyConfig;
use seckill::limiter::Scope;
use seckill::startup::Application;
use seckill::store::redis_store::RedisConnection;
use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{
    eventually, json, spawn_app_from, spawn_app_with, test_settings, use_own_redis, OwnRedis,
    TestApp,
};

/// The sale's policy in `settings`, set to `scope`.
fn sale_policy(settings: &mut Settings, scope: Scope) -> &mut PolicyConfig {
    let seckill = settings
        .limiter
        .policies
        .get_mut(SECKILL_POLICY)
        .expect("the sale's policy");
    seckill.scope = scope;
    seckill
}

/// The app with `seckill` at `scope` and its `api` rule at `api` purchases per ten
/// minutes (no slot frees during the test); `user` and `ip` as by default.
async fn app_with_api(db: &PgPool, scope: Scope, api: u64) -> TestApp {
    spawn_app_with(db, |settings| {
        let seckill = sale_policy(settings, scope);
        let rule = seckill
            .rules
            .iter_mut()
            .find(|rule| rule.name == "api")
            .expect("an api rule");
        rule.threshold = api;
        rule.window_ms = 600_000;
    })
    .await
}

/// `attempts` purchases of `item`, each by its own user from its own address (so only
/// `api` can refuse); returns (admitted, refused by `api`).
async fn buy(app: &TestApp, item: i64, first_user: i64, attempts: i64) -> (u64, u64) {
    let (mut admitted, mut refused) = (0, 0);
    for n in 0..attempts {
        let user = first_user + n;
        let token = app.token_for(user).await;
        let ip = format!("10.{}.{}.{}", item % 250, user / 250 % 250, user % 250);
        let response = app.post_seckill(&token, item, &ip).await;
        match response.status().as_u16() {
            200 => admitted += 1,
            429 => {
                let body = json(response).await;
                assert_eq!(body["dimension"], "api", "user {user}: {body}");
                refused += 1;
            }
            other => panic!("user {user}: unexpected {other}: {}", json(response).await),
        }
    }
    (admitted, refused)
}

#[sqlx::test]
async fn per_item_counts_the_api_limit_per_sale(db: PgPool) {
    let app = app_with_api(&db, Scope::PerItem, 3).await;
    let (first, second) = (app.open_item(100).await, app.open_item(100).await);
    assert_eq!(buy(&app, first, 1_000, 5).await, (3, 2));
    assert_eq!(buy(&app, second, 2_000, 5).await, (3, 2));
}

#[sqlx::test]
async fn global_counts_the_api_limit_across_all_sales(db: PgPool) {
    let app = app_with_api(&db, Scope::Global, 3).await;
    let (first, second) = (app.open_item(100).await, app.open_item(100).await);
    assert_eq!(buy(&app, first, 1_000, 5).await, (3, 2));
    assert_eq!(buy(&app, second, 2_000, 5).await, (0, 5));
}

/// The hash tag of `key`: what Redis Cluster hashes to pick its slot.
fn hash_tag(key: &str) -> &str {
    let open = key.find('{').expect("a hash tag");
    let close = key[open..].find('}').expect("a closed hash tag") + open;
    &key[open + 1..close]
}

async fn all_keys(redis: &mut RedisConnection, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(redis)
        .await
        .expect("KEYS");
    keys.sort();
    keys
}

/// `CLUSTER KEYSLOT key`, asked only of a Redis Cluster.
async fn keyslot(redis: &mut RedisConnection, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(redis)
        .await
        .expect("CLUSTER KEYSLOT")
}

/// An edit of `name`'s scope alone.
async fn put_scope(app: &TestApp, name: &str, scope: &str) -> reqwest::Response {
    app.put_policy(name, json!({ "scope": scope, "rules": [] }))
        .await
}

#[sqlx::test]
async fn the_admin_api_takes_per_item_for_the_sale_only_and_the_sale_follows(db: PgPool) {
    let app = spawn_app_with(&db, |_| {}).await;
    assert_eq!(app.policy(SECKILL_POLICY).await["scope"], "global");

    let refused = put_scope(&app, LIMITED_POLICY, "per_item").await;
    assert_eq!(refused.status(), 400);
    let body = json(refused).await;
    assert_eq!(body["code"], "VALIDATION_FAILED");
    assert_eq!(body["field"], "scope");
    let limited = app.policy(LIMITED_POLICY).await;
    assert_eq!(
        (limited["scope"].clone(), limited["version"].clone()),
        (json!("global"), json!(1))
    );

    let accepted = put_scope(&app, SECKILL_POLICY, "per_item").await;
    assert_eq!(accepted.status(), 200);
    assert_eq!(json(accepted).await["scope"], "per_item");
    let seckill = app.policy(SECKILL_POLICY).await;
    assert_eq!(
        (seckill["scope"].clone(), seckill["version"].clone()),
        (json!("per_item"), json!(2))
    );

    // In force within the rule watcher's reload: a purchase is then counted under the
    // item's tag.
    let item = app.open_item(100).await;
    let api_key = format!(
        "{}:{{item:{item}}}:limit:seckill:sliding_window:api:lit:purchase",
        app.settings.redis_key_prefix
    );
    let mut user = 5_000;
    let redis = app.redis().await;
    eventually(
        "the per_item scope in force",
        Duration::from_secs(5),
        || {
            user += 1;
            let (app, key, mut redis) = (&app, api_key.clone(), redis.clone());
            async move {
                assert_eq!(buy(app, item, user, 1).await, (1, 0));
                let exists: i64 = redis::cmd("EXISTS")
                    .arg(&key)
                    .query_async(&mut redis)
                    .await
                    .ok()?;
                (exists == 1).then_some(())
            }
        },
    )
    .await;

    let put_back = put_scope(&app, SECKILL_POLICY, "global").await;
    assert_eq!(put_back.status(), 200);
    assert_eq!(json(put_back).await["scope"], "global");
}

#[sqlx::test]
async fn a_per_item_scope_on_a_policy_without_items_refuses_to_start(db: PgPool) {
    let mut settings = test_settings(&db);
    let limited = settings
        .limiter
        .policies
        .get_mut(LIMITED_POLICY)
        .expect("limited");
    limited.scope = Scope::PerItem;
    let error = Application::build(settings)
        .await
        .err()
        .expect("the app refuses to build");
    assert!(
        error.to_string().contains("cannot be per_item"),
        "{error:#}"
    );
}

/// A background loop's period long enough not to tick again during a test.
const IDLE_MS: u64 = 3_600_000;

/// Script calls (EVALSHA) a Redis has answered since its statistics were reset, less
/// the ones refused (`NOSCRIPT` before a fresh Redis has loaded a script).
async fn evalsha_calls(redis: &mut RedisConnection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(redis)
        .await
        .expect("INFO commandstats");
    let Some(stats) = info
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:"))
    else {
        return 0;
    };
    let field = |name: &str| -> i64 {
        stats
            .split(',')
            .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    field("calls") - field("failed_calls") - field("rejected_calls")
}

/// With `per_item` the reservation runs in the limiter's own call: a purchase is one
/// script call, not two; with `global` the two scripts are two calls. Both sell the
/// same. Counted on a Redis of the test's own, so no other test's calls mix in, with
/// the reconciler, the sweeper and the limiter's heartbeat idle after their start-up
/// round, the blocks' watcher idle and the history off: each may call a script of its
/// own when it lands mid-purchase. The heartbeat is one script call a second, so
/// purchases slower than a second in all (a loaded machine) counted 11 calls for 10; the
/// history's append (once a second while purchases move the counters) and the blocks'
/// watcher (every 200 ms) counted 11 for 10 the same way.
async fn script_calls_per_purchase(db: &PgPool, scope: Scope, scripts_per_purchase: i64) {
    let redis = OwnRedis::start().await;
    let mut settings = test_settings(db);
    use_own_redis(&mut settings, redis.url());
    sale_policy(&mut settings, scope);
    settings.reconcile_interval_ms = IDLE_MS;
    settings.expiry_sweep_interval_ms = IDLE_MS;
    settings.limiter.heartbeat_ms = IDLE_MS;
    // The history off: the stats flush appends no record (a script call a second); the
    // blocks' watcher idle (a script call every 200 ms).
    settings.history.stream_max_len = 0;
    settings.history.block_poll_ms = IDLE_MS;
    let app = spawn_app_from(settings).await;
    eventually(
        "the start-up reconciler round and heartbeat",
        Duration::from_secs(10),
        || async {
            let reconciled = app.metric_sum("seckill_reconciler_rounds_total").await >= 1.0;
            let beaten = app.metric_sum("seckill_limiter_instances").await >= 1.0;
            (reconciled && beaten).then_some(())
        },
    )
    .await;
    let item = app.open_item(5).await;
    let mut conn = app.redis().await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("CONFIG RESETSTAT");
    assert_eq!(buy(&app, item, 7_000, 5).await, (5, 0), "{scope:?}");
    assert_eq!(
        evalsha_calls(&mut conn).await,
        5 * scripts_per_purchase,
        "{scope:?}: script calls for 5 purchases"
    );
    let token = app.token_for(7_100).await;
    let sold_out = app.post_seckill(&token, item, "10.99.0.1").await;
    assert_eq!(sold_out.status(), 409, "{scope:?}");
    assert_eq!(json(sold_out).await["code"], "SOLD_OUT", "{scope:?}");
}

#[sqlx::test]
async fn per_item_reserves_in_the_limiters_call(db: PgPool) {
    script_calls_per_purchase(&db, Scope::PerItem, 1).await;
}

#[sqlx::test]
async fn global_reserves_in_a_call_of_its_own(db: PgPool) {
    script_calls_per_purchase(&db, Scope::Global, 2).await;
}

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

    #[sqlx::test]
    async fn per_item_limiter_keys_share_the_slot_of_their_items_stock(db: PgPool) {
        let app = app_with_api(&db, Scope::PerItem, 1_000).await;
        let items = [app.open_item(100).await, app.open_item(100).await];
        for (n, item) in items.iter().enumerate() {
            assert_eq!(buy(&app, *item, 1_000 * (n as i64 + 1), 2).await, (2, 0));
        }
        let prefix = &app.settings.redis_key_prefix;
        let mut redis = app.redis().await;
        let limiter_keys: Vec<String> = all_keys(&mut redis, prefix)
            .await
            .into_iter()
            .filter(|key| key.contains(":limit:") || key.contains(&format!("{{{SECKILL_POLICY}}}")))
            .collect();
        let cluster = std::env::var("SECKILL_REDIS_CLUSTER_NODES").is_ok_and(|n| !n.is_empty());
        let mut by_item = BTreeMap::new();
        for (n, item) in items.iter().enumerate() {
            let stock = app.item_keys(*item).stock();
            let ours: Vec<&String> = limiter_keys
                .iter()
                .filter(|key| hash_tag(key) == hash_tag(&stock))
                .collect();
            // api once, then user and ip for each of the two buyers.
            let first = 1_000 * (n as i64 + 1);
            let base = format!("{prefix}:{{item:{item}}}:limit:seckill:sliding_window");
            let mut expected = vec![format!("{base}:api:lit:purchase")];
            for user in [first, first + 1] {
                let ip = format!("10.{}.{}.{}", item % 250, user / 250 % 250, user % 250);
                expected.push(format!("{base}:user:{user}"));
                expected.push(format!("{base}:ip:{ip}"));
            }
            expected.sort();
            let mut found: Vec<String> = ours.iter().map(|key| key.to_string()).collect();
            found.sort();
            assert_eq!(found, expected, "item {item}");
            if cluster {
                let slot = keyslot(&mut redis, &stock).await;
                for key in &ours {
                    assert_eq!(keyslot(&mut redis, key).await, slot, "{key} vs {stock}");
                }
            }
            by_item.insert(*item, ours.len());
        }
        // Every limiter key is one of an item's: none under the policy's global tag.
        assert_eq!(
            by_item.values().sum::<usize>(),
            limiter_keys.len(),
            "{limiter_keys:#?}"
        );
    }
}
