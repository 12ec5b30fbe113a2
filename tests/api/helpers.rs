//! `TestApp`: the real application on port 0, its own Postgres database (from
//! `#[sqlx::test]`), its own Redis key prefix, and typed helpers to talk to it.

use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use seckill::configuration::Settings;
use seckill::sale::item::ItemId;
use seckill::sale::stock::ItemKeys;
use seckill::startup::{AppHandle, Application};
use seckill::store::redis_store::RedisConnection;
use seckill::store::RedisStore;
use secrecy::SecretString;
use sqlx::PgPool;
use sqlx::{Connection, Executor, PgConnection};

/// The admin token every test app accepts.
pub const ADMIN_TOKEN: &str = "test-admin-token";

pub struct TestApp {
    pub address: String,
    /// The probe listener (`/health/*`, `/metrics` on connections of their own).
    pub probe_address: String,
    pub client: reqwest::Client,
    pub settings: Settings,
    /// Name of this test's own database.
    pub db_name: String,
    handle: AppHandle,
}

fn env(name: &str) -> String {
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

/// A connection to the Redis of `settings` (one server or the cluster).
pub async fn redis_connection(settings: &Settings) -> RedisConnection {
    RedisStore::connect_raw(&seckill::startup::redis_options(settings))
        .await
        .expect("redis connection")
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

/// Points `settings` at a Redis of the test's own (one server, whatever the suite's
/// Redis is): the tests that stop, break or swap Redis.
pub fn use_own_redis(settings: &mut Settings, url: impl Into<SecretString>) {
    settings.redis_url = url.into();
    settings.redis_cluster_nodes = SecretString::from("");
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
        workers: Some(2),
        shutdown_timeout_secs: 1,
        database_url: SecretString::from(url.to_string()),
        database_max_connections: 10,
        admin_token: SecretString::from(ADMIN_TOKEN),
        log_level: std::env::var("TEST_LOG").unwrap_or_else(|_| "off".into()),
        ..redis_test_settings()
    }
}

pub async fn spawn_app(db: &PgPool) -> TestApp {
    spawn_app_with(db, |_| {}).await
}

/// Starts the app with settings adjusted by `tweak` (after the test defaults).
pub async fn spawn_app_with(db: &PgPool, tweak: impl FnOnce(&mut Settings)) -> TestApp {
    let mut settings = test_settings(db);
    tweak(&mut settings);
    spawn_app_from(settings).await
}

pub async fn spawn_app_from(settings: Settings) -> TestApp {
    if std::env::var("TEST_LOG").is_ok() {
        seckill::telemetry::init(&settings);
    }
    let db_name = url::Url::parse(secrecy::ExposeSecret::expose_secret(&settings.database_url))
        .map(|u| u.path().trim_start_matches('/').to_string())
        .unwrap_or_default();
    let app = Application::build(settings.clone())
        .await
        .expect("the app builds");
    let port = app.port();
    let probe_port = app.probe_port();
    let handle = app.handle();
    tokio::spawn(app.run_until_stopped());
    TestApp {
        address: format!("http://127.0.0.1:{port}"),
        probe_address: format!("http://127.0.0.1:{probe_port}"),
        client: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a client"),
        settings,
        db_name,
        handle,
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        // Sends the stop command now; the workers wind down on their own threads.
        drop(self.handle.stop(false));
    }
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request sent")
    }

    /// Creates an item through the admin API; returns its id.
    pub async fn create_item(
        &self,
        stock: i64,
        starts_in: chrono::Duration,
        lasts: chrono::Duration,
    ) -> i64 {
        let starts_at = chrono::Utc::now() + starts_in;
        let response = self
            .client
            .post(self.url("/admin/api/items"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&serde_json::json!({
                "name": "Test item",
                "priceCents": 1999,
                "stock": stock,
                "startsAt": starts_at,
                "endsAt": starts_at + lasts,
            }))
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), 201);
        json(response).await["id"].as_i64().expect("an id")
    }

    /// An item on sale right now for an hour.
    pub async fn open_item(&self, stock: i64) -> i64 {
        self.create_item(
            stock,
            chrono::Duration::minutes(-1),
            chrono::Duration::hours(1),
        )
        .await
    }

    /// `POST /seckill` as `token`, from `ip` (sent as X-Forwarded-For: the test client
    /// connects from 127.0.0.1, a trusted proxy).
    pub async fn post_seckill(&self, token: &str, item_id: i64, ip: &str) -> reqwest::Response {
        self.client
            .post(self.url("/seckill"))
            .bearer_auth(token)
            .header("X-Forwarded-For", ip)
            .json(&serde_json::json!({ "itemId": item_id }))
            .send()
            .await
            .expect("request sent")
    }

    /// Buys `item` as `user` from an address of the user's own (10.70.x.y), expecting
    /// a 200; answers the user's token and the order's JSON.
    pub async fn buy(&self, user: i64, item: i64) -> (String, serde_json::Value) {
        let token = self.token_for(user).await;
        let ip = format!("10.70.{}.{}", user / 250 % 250, user % 250);
        let response = self.post_seckill(&token, item, &ip).await;
        assert_eq!(response.status(), 200, "user {user} buys item {item}");
        (token, json(response).await)
    }

    /// Waits until `rounds` more reconciler rounds have finished on this instance.
    pub async fn until_reconciled(&self, rounds: u32) {
        let metric = "seckill_reconciler_rounds_total";
        let target = self.metric_sum(metric).await + f64::from(rounds);
        eventually("reconciler rounds", Duration::from_secs(10), || async {
            (self.metric_sum(metric).await >= target).then_some(())
        })
        .await;
    }

    /// Waits until `item` has no pending reservation (see [`until_nothing_pending`]).
    pub async fn until_nothing_pending(&self, item: i64, what: &str, deadline: Duration) {
        until_nothing_pending(&self.settings, item, what, deadline).await
    }

    /// `GET key` on this app's Redis, read as `T` (`Option<i64>`, `Option<String>`…).
    pub async fn redis_get<T: redis::FromRedisValue>(&self, key: &str) -> T {
        let mut conn = self.redis().await;
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .expect("GET answers")
    }

    /// A connection to this app's Redis (one server or the cluster), for reading back
    /// what the app wrote.
    pub async fn redis(&self) -> RedisConnection {
        redis_connection(&self.settings).await
    }

    /// The keys of one item's sale state, spelled by the app's own key builder.
    pub fn item_keys(&self, item_id: i64) -> ItemKeys {
        item_keys(&self.settings.redis_key_prefix, item_id)
    }

    /// The sum of every series of a counter in `/metrics` whose line starts with `prefix`.
    pub async fn metric_sum(&self, prefix: &str) -> f64 {
        let text = self
            .get("/metrics")
            .await
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .filter(|line| line.starts_with(prefix))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub async fn post_session(&self, user_id: i64) -> reqwest::Response {
        self.client
            .post(self.url("/api/session"))
            .json(&serde_json::json!({ "userId": user_id }))
            .send()
            .await
            .expect("request sent")
    }

    /// A valid shopper token from the dev login.
    pub async fn token_for(&self, user_id: i64) -> String {
        let response = self.post_session(user_id).await;
        assert_eq!(response.status(), 200);
        let body: serde_json::Value = response.json().await.expect("json");
        body["token"].as_str().expect("a token").to_string()
    }

    /// Opens a connection to the server's maintenance database (not this test's one).
    pub async fn admin_connection(&self) -> PgConnection {
        PgConnection::connect(&env("DATABASE_URL"))
            .await
            .expect("maintenance connection")
    }

    /// Makes this test's database refuse connections and drops the app's open ones:
    /// Postgres is "down" for this app alone.
    pub async fn take_postgres_away(&self) {
        let mut conn = self.admin_connection().await;
        conn.execute(sqlx::AssertSqlSafe(format!(
            r#"ALTER DATABASE "{}" ALLOW_CONNECTIONS false"#,
            self.db_name
        )))
        .await
        .expect("alter database");
        sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
            .bind(&self.db_name)
            .execute(&mut conn)
            .await
            .expect("terminate backends");
    }

    pub async fn bring_postgres_back(&self) {
        let mut conn = self.admin_connection().await;
        conn.execute(sqlx::AssertSqlSafe(format!(
            r#"ALTER DATABASE "{}" ALLOW_CONNECTIONS true"#,
            self.db_name
        )))
        .await
        .expect("alter database");
    }
}

/// `GET path` with the admin token.
pub async fn admin_get(app: &TestApp, path: &str) -> reqwest::Response {
    app.client
        .get(app.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("an answer")
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

/// A `redis-server` owned by one test, on a unix socket in a temporary folder, so the
/// test can stop and restart it without touching the Redis every other test shares.
pub struct OwnRedis {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl OwnRedis {
    pub async fn start() -> Self {
        let mut redis = Self {
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        redis.restart().await;
        redis
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(self.socket());
    }

    /// Starts (again) on the same socket and waits until it answers PING.
    pub async fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args([
                "--port",
                "0",
                "--save",
                "",
                "--appendonly",
                "no",
                "--unixsocketperm",
                "700",
            ])
            .arg("--unixsocket")
            .arg(self.socket())
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed (scripts/services.sh installs it)");
        self.child = Some(child);
        let url = self.url();
        eventually("own redis answers", Duration::from_secs(10), || {
            let url = url.clone();
            async move {
                let client = redis::Client::open(url).ok()?;
                let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .ok()
            }
        })
        .await;
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Failpoints are process-wide and tests run in parallel: a test that aims a failpoint
/// other tests also use holds this for as long as the failpoint is configured.
pub async fn failpoint_lock() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// The keys of one item's sale state under `prefix`, spelled by the app's own key builder.
pub fn item_keys(prefix: &str, item_id: i64) -> ItemKeys {
    ItemKeys::new(prefix, ItemId::try_from(item_id).expect("a valid item id"))
}
