//! `TestApp`: the real application on port 0, its own Postgres database (from
//! `#[sqlx::test]`), its own Redis key prefix, and a method for every request the tests
//! send it, as in Zero To Production: a request is spelled once, here, and a test reads
//! as what it asks.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, Response};
use seckill::configuration::Settings;
use seckill::edge::{DomainStore, Edge};
use seckill::sale::stock::ItemKeys;
use seckill::startup::{AppHandle, Application};
use seckill::store::redis_store::RedisConnection;
use serde_json::{json as json_value, Value};
use sqlx::{Connection, Executor, PgConnection, PgPool};

use crate::settings::{env, test_settings, ADMIN_TOKEN};
use crate::stores::{item_keys, redis_connection, until_nothing_pending};
use crate::{eventually, json};

pub struct TestApp {
    pub address: String,
    /// The probe listener (`/health/*`, `/metrics` on connections of their own).
    pub probe_address: String,
    /// The NGINX gate's listener, when `gate_port` is set.
    pub gate_address: Option<String>,
    pub client: reqwest::Client,
    pub settings: Settings,
    /// Name of this test's own database.
    pub db_name: String,
    /// The edge domains and this instance's copy of them (`DomainStore::current`).
    pub domains: Arc<DomainStore>,
    /// The edge's engine, to ask without a transport.
    pub edge: Arc<Edge>,
    /// The rate-limit gRPC service's port (`rls_port`, 0 in the test settings).
    pub rls_port: Option<u16>,
    handle: AppHandle,
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
    let gate_address = app
        .gate_port()
        .map(|port| format!("http://127.0.0.1:{port}"));
    let handle = app.handle();
    let domains = app.domains();
    let edge = app.edge();
    let rls_port = app.rls_port();
    tokio::spawn(app.run_until_stopped());
    TestApp {
        address: format!("http://127.0.0.1:{port}"),
        probe_address: format!("http://127.0.0.1:{probe_port}"),
        gate_address,
        // A connection per request, none kept: the server ends a keep-alive connection
        // idle 5 s, and a test with many requests in flight on its one thread, on a
        // loaded machine, sent on one as it closed (`IncompleteMessage`, in two tests
        // of ten loaded suite runs). What is tested is never connection reuse.
        client: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(0)
            .build()
            .expect("a client"),
        settings,
        db_name,
        domains,
        edge,
        rls_port,
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

    pub async fn get(&self, path: &str) -> Response {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("request sent")
    }

    // Shoppers.

    pub async fn post_session(&self, user_id: i64) -> Response {
        self.client
            .post(self.url("/api/session"))
            .json(&json_value!({ "userId": user_id }))
            .send()
            .await
            .expect("request sent")
    }

    /// `POST /api/session` with a body and a `Content-Type` of the test's own, right or
    /// wrong.
    pub async fn post_session_raw(
        &self,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Response {
        self.client
            .post(self.url("/api/session"))
            .header(CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await
            .expect("request sent")
    }

    /// A valid shopper token from the dev login.
    pub async fn token_for(&self, user_id: i64) -> String {
        let response = self.post_session(user_id).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.expect("json");
        body["token"].as_str().expect("a token").to_string()
    }

    /// A token for each of `users`, one after another, each beside its user.
    pub async fn tokens(&self, users: impl IntoIterator<Item = i64>) -> Vec<(i64, String)> {
        let mut out = Vec::new();
        for user in users {
            out.push((user, self.token_for(user).await));
        }
        out
    }

    /// `GET /api/me` with `authorization` as the whole `Authorization` header, or none.
    pub async fn get_me(&self, authorization: Option<String>) -> Response {
        let mut request = self.client.get(self.url("/api/me"));
        if let Some(value) = authorization {
            request = request.header("Authorization", value);
        }
        request.send().await.expect("request sent")
    }

    /// `POST /seckill` as `token`, from `ip` (sent as X-Forwarded-For: the test client
    /// connects from 127.0.0.1, a trusted proxy).
    pub async fn post_seckill(&self, token: &str, item_id: i64, ip: &str) -> Response {
        self.post_seckill_with(token, item_id, ip, None, None).await
    }

    /// [`TestApp::post_seckill`] with a waiting room's `Queue-Pass` and an
    /// `Idempotency-Key`, each if given.
    pub async fn post_seckill_with(
        &self,
        token: &str,
        item_id: i64,
        ip: &str,
        pass: Option<&str>,
        key: Option<&str>,
    ) -> Response {
        let mut request = self
            .client
            .post(self.url("/seckill"))
            .bearer_auth(token)
            .header("X-Forwarded-For", ip)
            .json(&json_value!({ "itemId": item_id }));
        if let Some(pass) = pass {
            request = request.header("Queue-Pass", pass);
        }
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.expect("request sent")
    }

    /// Buys `item` as `user` from an address of the user's own (10.70.x.y), expecting
    /// a 200; answers the user's token and the order's JSON.
    pub async fn buy(&self, user: i64, item: i64) -> (String, Value) {
        let token = self.token_for(user).await;
        let ip = format!("10.70.{}.{}", user / 250 % 250, user % 250);
        let response = self.post_seckill(&token, item, &ip).await;
        assert_eq!(response.status(), 200, "user {user} buys item {item}");
        (token, json(response).await)
    }

    /// `GET /api/orders/mine` as `token`, from `ip` if given (as X-Forwarded-For),
    /// otherwise from the test client's own 127.0.0.1.
    pub async fn my_orders(&self, token: &str, ip: Option<&str>) -> Response {
        let mut request = self
            .client
            .get(self.url("/api/orders/mine"))
            .bearer_auth(token);
        if let Some(ip) = ip {
            request = request.header("X-Forwarded-For", ip);
        }
        request.send().await.expect("request sent")
    }

    /// `POST /api/orders/{order}/{action}` (`pay`, `cancel`) as `token`, with an
    /// `Idempotency-Key` if given.
    pub async fn order_call(
        &self,
        token: &str,
        order: &str,
        action: &str,
        key: Option<&str>,
    ) -> Response {
        let mut request = self
            .client
            .post(self.url(&format!("/api/orders/{order}/{action}")))
            .bearer_auth(token);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        request.send().await.expect("request sent")
    }

    /// `POST /api/items/{item}/queue`: joins the item's waiting room.
    pub async fn join_queue(&self, token: &str, item: i64, ip: &str) -> Response {
        self.client
            .post(self.url(&format!("/api/items/{item}/queue")))
            .bearer_auth(token)
            .header("X-Forwarded-For", ip)
            .send()
            .await
            .expect("request sent")
    }

    /// `GET /api/items/{item}/queue` with the `ticket` the join gave.
    pub async fn poll_queue(&self, token: &str, item: i64, ticket: &str) -> Response {
        self.client
            .get(self.url(&format!("/api/items/{item}/queue")))
            .bearer_auth(token)
            .header("Queue-Ticket", ticket)
            .send()
            .await
            .expect("request sent")
    }

    /// `GET /api/limited{query}` as client `client_id` (`X-Client-Id`, believed from the
    /// test client, a trusted proxy).
    pub async fn limited(&self, query: &str, client_id: &str) -> Response {
        self.client
            .get(self.url(&format!("/api/limited{query}")))
            .header("X-Client-Id", client_id)
            .send()
            .await
            .expect("request sent")
    }

    /// Waits until this instance serves `want` as `RateLimit-Policy` on `/api/limited`
    /// (an edit made through another instance arrives with its next reload); answers
    /// how long that took. Each probe is a client of its own, so probing spends no
    /// one's quota.
    pub async fn until_policy_served(&self, want: &str) -> Duration {
        let (_, took) = eventually("the policy is in force", Duration::from_secs(10), || {
            let client = format!("probe-{}", uuid::Uuid::new_v4().simple());
            async move {
                let response = self.limited("", &client).await;
                let served = response.headers().get("ratelimit-policy")?.to_str().ok()?;
                (served == want).then_some(())
            }
        })
        .await;
        took
    }

    // Operators.

    /// `GET path` with the admin token.
    pub async fn admin_get(&self, path: &str) -> Response {
        self.admin_send(Method::GET, path, None).await
    }

    /// The actions of an item's audit, newest first (`create`, `edit`, `end`, …).
    pub async fn audit_actions(&self, item: i64) -> Vec<String> {
        let audit = json(
            self.admin_get(&format!("/admin/api/items/{item}/audit"))
                .await,
        )
        .await;
        audit["entries"]
            .as_array()
            .unwrap_or_else(|| panic!("an audit: {audit}"))
            .iter()
            .map(|e| e["action"].as_str().expect("an action").to_string())
            .collect()
    }

    /// `method path` with the admin token and a JSON body, if any.
    pub async fn admin_send(&self, method: Method, path: &str, body: Option<Value>) -> Response {
        let mut request = self
            .client
            .request(method, self.url(path))
            .bearer_auth(ADMIN_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.expect("request sent")
    }

    /// `GET /admin/api/me` with `token`, from `ip`: a sign-in, right token or not.
    pub async fn sign_in(&self, ip: &str, token: &str) -> Response {
        self.client
            .get(self.url("/admin/api/me"))
            .bearer_auth(token)
            .header("X-Forwarded-For", ip)
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
        let item = json_value!({
            "name": "Test item",
            "priceCents": 1999,
            "stock": stock,
            "startsAt": starts_at,
            "endsAt": starts_at + lasts,
        });
        let response = self
            .admin_send(Method::POST, "/admin/api/items", Some(item))
            .await;
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

    /// `PATCH /admin/api/items/{item}`: an operator's edit.
    pub async fn patch_item(&self, item: i64, edit: Value) -> Response {
        let path = format!("/admin/api/items/{item}");
        self.admin_send(Method::PATCH, &path, Some(edit)).await
    }

    /// Waits until this instance lists `count` items (one made through another instance
    /// arrives with its next reload).
    pub async fn until_items_listed(&self, count: usize) {
        eventually(
            "the instance lists the items",
            Duration::from_secs(10),
            || async {
                let listing = json(self.get("/api/items").await).await;
                (listing["items"].as_array()?.len() == count).then_some(())
            },
        )
        .await;
    }

    /// `PUT /admin/api/policies/{name}`: an edit of a rate-limit policy.
    pub async fn put_policy(&self, name: &str, edit: Value) -> Response {
        let path = format!("/admin/api/policies/{name}");
        self.admin_send(Method::PUT, &path, Some(edit)).await
    }

    /// [`TestApp::put_policy`] with an `If-Match` header.
    pub async fn put_policy_if_match(&self, name: &str, if_match: &str, edit: Value) -> Response {
        self.client
            .put(self.url(&format!("/admin/api/policies/{name}")))
            .bearer_auth(ADMIN_TOKEN)
            .header("If-Match", if_match)
            .json(&edit)
            .send()
            .await
            .expect("request sent")
    }

    /// `method /admin/api/rls/domains/{domain}` with the admin token, a JSON body and an
    /// `If-Match`, if any.
    pub async fn rls_domain(
        &self,
        method: Method,
        domain: &str,
        body: Option<Value>,
        if_match: Option<&str>,
    ) -> Response {
        let mut request = self
            .client
            .request(
                method,
                self.url(&format!("/admin/api/rls/domains/{domain}")),
            )
            .bearer_auth(ADMIN_TOKEN);
        if let Some(tag) = if_match {
            request = request.header("If-Match", tag);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send().await.expect("request sent")
    }

    /// `GET /admin/api/policies/{name}`, expecting a 200.
    pub async fn policy(&self, name: &str) -> Value {
        let response = self.admin_get(&format!("/admin/api/policies/{name}")).await;
        assert_eq!(response.status(), 200);
        json(response).await
    }

    /// One policy as `GET /admin/api/policies` lists it.
    pub async fn listed_policy(&self, name: &str) -> Value {
        let policies = json(self.admin_get("/admin/api/policies").await).await;
        policies["policies"]
            .as_array()
            .expect("a list of policies")
            .iter()
            .find(|p| p["name"] == name)
            .expect("the policy is listed")
            .clone()
    }

    /// `PUT /admin/api/items/{item}/waiting-room`.
    pub async fn set_room(&self, item: i64, settings: Value) -> Response {
        let path = format!("/admin/api/items/{item}/waiting-room");
        self.admin_send(Method::PUT, &path, Some(settings)).await
    }

    /// `GET /admin/api/items/{item}/waiting-room`, read as JSON.
    pub async fn get_room(&self, item: i64) -> Value {
        let path = format!("/admin/api/items/{item}/waiting-room");
        json(self.admin_get(&path).await).await
    }

    /// `POST /admin/api/blocks` with `body`.
    pub async fn post_block(&self, body: Value) -> Response {
        self.admin_send(Method::POST, "/admin/api/blocks", Some(body))
            .await
    }

    /// Blocks `kind` `value` for `seconds`, expecting a 201 confirmed by every live
    /// instance; answers the body.
    pub async fn block(&self, kind: &str, value: &str, seconds: i64) -> Value {
        let body =
            json_value!({ "kind": kind, "value": value, "seconds": seconds, "reason": "test" });
        let response = self.post_block(body).await;
        assert_eq!(response.status(), 201, "block {kind} {value}");
        let body = json(response).await;
        assert_eq!(body["unconfirmed"], json_value!([]), "{body}");
        body
    }

    /// `DELETE /admin/api/blocks/{kind}/{value}`, `value` percent-encoded here.
    pub async fn delete_block(&self, kind: &str, value: &str) -> Response {
        let value: String = value
            .bytes()
            .map(|b| match b {
                b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'.' | b'-' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let path = format!("/admin/api/blocks/{kind}/{value}");
        self.admin_send(Method::DELETE, &path, None).await
    }

    /// `GET /api/limited` from `ip` (X-Forwarded-For), as its own client.
    pub async fn limited_from(&self, ip: &str) -> Response {
        self.client
            .get(self.url("/api/limited"))
            .header("X-Forwarded-For", ip)
            .send()
            .await
            .expect("request sent")
    }

    // Metrics and background work.

    /// The sum of every series of a counter in `/metrics` whose line starts with `prefix`.
    /// A client of the rate-limit gRPC service, on a connection of its own.
    pub async fn rls(&self) -> RateLimitServiceClient<tonic::transport::Channel> {
        let port = self.rls_port.expect("the test settings set rls_port");
        RateLimitServiceClient::connect(format!("http://127.0.0.1:{port}"))
            .await
            .expect("the gRPC service answers")
    }

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

    // Behind the app's back: its Redis and its database.

    /// A connection to this app's Redis (one server or the cluster), for reading back
    /// what the app wrote.
    pub async fn redis(&self) -> RedisConnection {
        redis_connection(&self.settings).await
    }

    /// `command key` on this app's Redis (`ZCARD`, `PTTL`, `DEL`…), read as `T`.
    pub async fn redis_command<T: redis::FromRedisValue>(&self, command: &str, key: &str) -> T {
        let mut conn = self.redis().await;
        redis::cmd(command)
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{command} {key}: {e}"))
    }

    /// The keys of this app's Redis matching `pattern` (`SCAN … MATCH`), for a test that
    /// counts what a client made exist. One server only: a cluster's `SCAN` sees one node.
    pub async fn keys_matching(&self, pattern: &str) -> Vec<String> {
        let mut conn = self.redis().await;
        let (mut cursor, mut keys) = (0u64, Vec::new());
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1_000)
                .query_async(&mut conn)
                .await
                .unwrap_or_else(|e| panic!("SCAN {pattern}: {e}"));
            keys.extend(batch);
            if next == 0 {
                return keys;
            }
            cursor = next;
        }
    }

    /// `GET key` on this app's Redis, read as `T` (`Option<i64>`, `Option<String>`…).
    pub async fn redis_get<T: redis::FromRedisValue>(&self, key: &str) -> T {
        self.redis_command("GET", key).await
    }

    /// The keys of one item's sale state, spelled by the app's own key builder.
    pub fn item_keys(&self, item_id: i64) -> ItemKeys {
        item_keys(&self.settings.redis_key_prefix, item_id)
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
        let mut conn = self.allow_connections(false).await;
        sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
            .bind(&self.db_name)
            .execute(&mut conn)
            .await
            .expect("terminate backends");
    }

    pub async fn bring_postgres_back(&self) {
        self.allow_connections(true).await;
    }

    /// Lets this test's database take connections or not; answers the maintenance
    /// connection that said so.
    async fn allow_connections(&self, allow: bool) -> PgConnection {
        let mut conn = self.admin_connection().await;
        conn.execute(sqlx::AssertSqlSafe(format!(
            r#"ALTER DATABASE "{}" ALLOW_CONNECTIONS {allow}"#,
            self.db_name
        )))
        .await
        .expect("alter database");
        conn
    }
}
