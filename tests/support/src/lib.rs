//! What seckill's test binaries share: the HTTP suite (`tests/api/`) and the failover
//! tests (`tests/cluster_failover.rs`, `tests/sentinel_failover.rs`). A crate of its own,
//! a dev-dependency of `seckill`, so each binary uses what it needs of it and it is
//! built once for all three.
//!
//! - `test_app`: [`TestApp`], the real application on port 0 against the real Redis and
//!   a fresh Postgres database, started by [`spawn_app`] and its variants; every request
//!   a test sends it is one of its methods.
//! - `settings`: the test settings ([`test_settings`]) and the tweaks several tests
//!   apply ([`quick_expiry`], [`use_own_redis`]).
//! - `stores`: Redis and Postgres read behind the app's back ([`pg_orders`],
//!   [`until_redis_agrees_with_postgres`], …).
//! - `own_redis`: [`OwnRedis`], a `redis-server` a test may stop and restart.
//!
//! Here, the few small things every kind of test uses: [`json`], [`eventually`],
//! [`ip_of`], [`failpoint_lock`].

mod own_redis;
mod settings;
mod stores;
mod test_app;

use std::future::Future;
use std::time::{Duration, Instant};

pub use own_redis::OwnRedis;
pub use settings::{
    out_of_reach_budgets, quick_expiry, redis_test_settings, test_settings, use_own_redis,
    ADMIN_TOKEN,
};
pub use stores::{
    item_keys, migrate_before, pg_orders, pg_remaining, redis_connection, until_nothing_pending,
    until_redis_agrees_with_postgres,
};
pub use test_app::{spawn_app, spawn_app_from, spawn_app_with, TestApp};

/// Reads the whole body as JSON.
pub async fn json(response: reqwest::Response) -> serde_json::Value {
    response.json().await.expect("a JSON body")
}

/// Polls `probe` every 50 ms until it yields `Some`, or panics after `deadline`.
/// Returns the value and how long it took.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut probe: F) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    loop {
        tick.tick().await;
        if let Some(value) = probe().await {
            return (value, start.elapsed());
        }
        assert!(
            start.elapsed() < deadline,
            "{what}: not within {deadline:?}"
        );
    }
}

/// An address of `user`'s own (10.80.x.y), so shoppers never share the sale policy's
/// per-address quota. [`TestApp::buy`] uses 10.70.x.y: a test may send one user's
/// purchases through both without the two counting against one address.
pub fn ip_of(user: i64) -> String {
    format!("10.80.{}.{}", user / 250 % 250, user % 250)
}

/// Failpoints are process-wide and tests run in parallel: a test that aims a failpoint
/// other tests also use holds this for as long as the failpoint is configured.
pub async fn failpoint_lock() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}
