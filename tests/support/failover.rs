//! What the failover tests (`tests/cluster_failover.rs`, `tests/sentinel_failover.rs`)
//! check last, shared by both: included with `#[path]` beside `api/helpers.rs`.

use std::time::Duration;

use sqlx::PgPool;

use crate::helpers::{eventually, pg_orders, pg_remaining, redis_connection, TestApp};

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
