//! Reading Redis and Postgres behind the app's back: what a test checks the app wrote.

use std::time::Duration;

use seckill::configuration::Settings;
use seckill::sale::item::ItemId;
use seckill::sale::stock::ItemKeys;
use seckill::store::redis_store::RedisConnection;
use seckill::store::RedisStore;
use sqlx::PgPool;

use crate::{eventually, TestApp};

/// A connection to the Redis of `settings` (one server or the cluster).
pub async fn redis_connection(settings: &Settings) -> RedisConnection {
    RedisStore::connect_raw(&seckill::startup::redis_options(settings))
        .await
        .expect("redis connection")
}

/// The keys of one item's sale state under `prefix`, spelled by the app's own key builder.
pub fn item_keys(prefix: &str, item_id: i64) -> ItemKeys {
    ItemKeys::new(prefix, ItemId::try_from(item_id).expect("a valid item id"))
}

/// Waits until `item` has no pending reservation in the Redis of `settings` (settled by
/// the committer or the reconciler), polling with `deadline`.
pub async fn until_nothing_pending(settings: &Settings, item: i64, what: &str, deadline: Duration) {
    let conn = redis_connection(settings).await;
    eventually(what, deadline, || {
        let mut conn = conn.clone();
        let key = item_keys(&settings.redis_key_prefix, item).pending();
        async move {
            let pending: i64 = redis::cmd("ZCARD")
                .arg(key)
                .query_async(&mut conn)
                .await
                .ok()?;
            (pending == 0).then_some(())
        }
    })
    .await;
}

/// Postgres's remaining stock of an item.
pub async fn pg_remaining(db: &PgPool, item: i64) -> i32 {
    sqlx::query_scalar("SELECT remaining_stock FROM items WHERE id = $1")
        .bind(item)
        .fetch_one(db)
        .await
        .expect("the item exists")
}

/// How many orders Postgres holds for an item.
pub async fn pg_orders(db: &PgPool, item: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM orders WHERE item_id = $1")
        .bind(item)
        .fetch_one(db)
        .await
        .expect("count orders")
}

/// Waits, at most `deadline`, until `app`'s Redis says what `db` says of `item`:
/// nothing pending, the stock counter at Postgres's remaining stock, the success
/// counter at its orders. Answers (orders, remaining) and how long it took: the
/// failover tests' last check, after a reconciler round has repaired what a lost
/// write left behind.
pub async fn until_redis_agrees_with_postgres(
    app: &TestApp,
    db: &PgPool,
    item: i64,
    deadline: Duration,
) -> ((i64, i64), Duration) {
    let keys = app.item_keys(item);
    let conn = redis_connection(&app.settings).await;
    eventually(
        "Redis agrees with Postgres after the reconciler",
        deadline,
        || {
            let mut conn = conn.clone();
            let (stock_key, success_key, pending_key) =
                (keys.stock(), keys.success(), keys.pending());
            async move {
                let redis_stock: Option<i64> = redis::cmd("GET")
                    .arg(&stock_key)
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                let success: Option<i64> = redis::cmd("GET")
                    .arg(&success_key)
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                let pending: i64 = redis::cmd("ZCARD")
                    .arg(&pending_key)
                    .query_async(&mut conn)
                    .await
                    .ok()?;
                let orders = pg_orders(db, item).await;
                let remaining = i64::from(pg_remaining(db, item).await);
                let agree = pending == 0
                    && redis_stock == Some(remaining)
                    && success.unwrap_or(0) == orders;
                agree.then_some((orders, remaining))
            }
        },
    )
    .await
}

/// Migrates `db` with the migrations older than `version` only: the schema of the release
/// before that migration, so an upgrade test can write that release's rows and then start
/// the app, which runs the rest.
pub async fn migrate_before(db: &PgPool, version: i64) {
    let previous = tempfile::tempdir().expect("a temporary folder");
    let all = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations");
    for entry in std::fs::read_dir(all).expect("the migrations folder") {
        let path = entry.expect("a migration").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a migration's name");
        let own: i64 = name
            .split('_')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a migration's version");
        if own < version {
            std::fs::copy(&path, previous.path().join(name)).expect("a copied migration");
        }
    }
    sqlx::migrate::Migrator::new(previous.path())
        .await
        .expect("the earlier migrations")
        .run(db)
        .await
        .expect("the earlier schema");
}
