//! The settings a test app starts with, and the tweaks several tests apply to them.

use seckill::configuration::Settings;
use secrecy::SecretString;
use sqlx::PgPool;

/// The admin token every test app accepts.
pub const ADMIN_TOKEN: &str = "test-admin-token";

pub(crate) fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the suite through `make test`, which starts the services")
    })
}

/// Settings with the shared test Redis and a fresh key prefix: no other test sees its keys.
/// With `SECKILL_REDIS_CLUSTER_NODES` set (`make test`'s cluster pass), that Redis is a
/// Redis Cluster.
pub fn redis_test_settings() -> Settings {
    Settings {
        redis_url: SecretString::from(env("REDIS_URL")),
        redis_cluster_nodes: SecretString::from(
            std::env::var("SECKILL_REDIS_CLUSTER_NODES").unwrap_or_default(),
        ),
        redis_key_prefix: format!("test:{}", uuid::Uuid::new_v4().simple()),
        ..Settings::default()
    }
}

/// Settings pointing at this test's database and a fresh Redis key prefix.
pub fn test_settings(db: &PgPool) -> Settings {
    let options = db.connect_options();
    let db_name = options
        .get_database()
        .expect("sqlx::test names the database");
    let mut url = url::Url::parse(&env("DATABASE_URL")).expect("DATABASE_URL is a URL");
    url.set_path(db_name);
    Settings {
        port: 0,
        probe_port: 0,
        rls_port: Some(0),
        workers: Some(2),
        shutdown_timeout_secs: 1,
        database_url: SecretString::from(url.to_string()),
        database_max_connections: 10,
        admin_token: SecretString::from(ADMIN_TOKEN),
        log_level: std::env::var("TEST_LOG").unwrap_or_else(|_| "off".into()),
        // Tests poll a room every 50 ms until it answers what they wait for: the poll
        // budget (20 at once, one a second) is put out of their reach, and tested
        // by `tests/api/waiting_room.rs` with its own figures.
        queue_poll_burst: 1_000_000,
        ..redis_test_settings()
    }
}

/// Points `settings` at a Redis of the test's own (one server, whatever the suite's
/// Redis is): the tests that stop, break or swap Redis.
pub fn use_own_redis(settings: &mut Settings, url: impl Into<SecretString>) {
    settings.redis_url = url.into();
    settings.redis_cluster_nodes = SecretString::from("");
}

/// Orders expire one second after they are placed, and the sweeper looks often.
pub fn quick_expiry(s: &mut Settings) {
    s.payment_deadline_secs = 1;
    s.expiry_sweep_interval_ms = 50;
}

/// Every budget a purchase spends out of reach of a loaded machine, and the overload
/// guards off: for the tests of exactness (how many orders, no oversell), whose counts
/// must not depend on the machine's speed. Under `stress-ng --cpu 2`, 500 purchases at
/// once kept some reservations or commits past their default budgets (seen as
/// `{"200": 93, "503 ORDER_FAILED": 7, "409 SOLD_OUT": 400}`), and a slow window can
/// lower the shedding limit or open the orders breaker. The reservation deadline stays
/// above the longest an order can take, as the start-up check requires.
pub fn out_of_reach_budgets(s: &mut Settings) {
    const BUDGET_MS: u64 = 60_000;
    s.limiter.timeout_ms = BUDGET_MS;
    s.redis_timeout_ms = BUDGET_MS;
    s.database_acquire_timeout_ms = BUDGET_MS;
    s.order_commit_timeout_ms = BUDGET_MS;
    s.database_statement_timeout_ms = BUDGET_MS;
    s.database_idle_in_transaction_timeout_ms = BUDGET_MS;
    s.head_timeout_ms = BUDGET_MS;
    s.body_timeout_ms = BUDGET_MS;
    s.reservation_deadline_ms = 6 * BUDGET_MS;
    s.shedding_enabled = false;
    s.orders_breaker_failures = 0;
}
