//! A sale driven at two real processes while one is killed with SIGKILL and restarted.
//! Afterwards Redis and Postgres agree, nothing is oversold, every 200 has its order,
//! and every order belongs to a 200 or to an answer the client never got.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use secrecy::ExposeSecret;
use sqlx::PgPool;

use seckill_test_support::{eventually, item_keys, json, pg_remaining, test_settings, ADMIN_TOKEN};

/// One `seckill` process on a fixed port (and probe port); killed when dropped.
struct Instance {
    port: u16,
    probe_port: u16,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Instance {
    fn start(env: &[(String, String)]) -> Self {
        let free_port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let mut instance = Self {
            port: free_port(),
            probe_port: free_port(),
            env: env.to_vec(),
            child: None,
        };
        instance.spawn();
        instance
    }

    fn spawn(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_seckill"))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("SECKILL_PORT", self.port.to_string())
            .env("SECKILL_PROBE_PORT", self.probe_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the seckill binary starts");
        self.child = Some(child);
    }

    /// SIGKILL: no graceful shutdown, no cleanup, requests cut mid-flight.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, as a supervisor stops it; answers how long it took to exit, or `None`
    /// when it had not exited after `deadline`.
    async fn terminate(&mut self, deadline: Duration) -> Option<Duration> {
        let child = self.child.as_mut()?;
        let sent = std::time::Instant::now();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        while sent.elapsed() < deadline {
            if child
                .try_wait()
                .expect("the child can be waited for")
                .is_some()
            {
                self.child = None;
                return Some(sent.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn wait_ready(&self, client: &reqwest::Client) {
        eventually("the instance is ready", Duration::from_secs(30), || async {
            let response = client.get(self.url("/health/ready")).send().await.ok()?;
            (response.status() == 200).then_some(())
        })
        .await;
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Debug)]
enum Outcome {
    Ordered(String),
    Refused(u16),
    /// The connection died: the client cannot know whether an order was made.
    Unknown,
}

/// The environment of an instance under chaos: this test's stores, a quick reconciler.
fn chaos_env(settings: &seckill::configuration::Settings) -> Vec<(String, String)> {
    [
        (
            "DATABASE_URL",
            settings.database_url.expose_secret().to_string(),
        ),
        ("REDIS_URL", settings.redis_url.expose_secret().to_string()),
        (
            "SECKILL_REDIS_CLUSTER_NODES",
            settings.redis_cluster_nodes.expose_secret().to_string(),
        ),
        (
            "SECKILL_REDIS_SENTINELS",
            settings.redis_sentinels.expose_secret().to_string(),
        ),
        (
            "SECKILL_REDIS_KEY_PREFIX",
            settings.redis_key_prefix.clone(),
        ),
        ("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
        ("SECKILL_WORKERS", "2".to_string()),
        ("SECKILL_LOG_LEVEL", "warn".to_string()),
        ("SECKILL_ORDER_COMMIT_TIMEOUT_MS", "1000".to_string()),
        ("SECKILL_DATABASE_STATEMENT_TIMEOUT_MS", "1000".to_string()),
        (
            "SECKILL_DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS",
            "500".to_string(),
        ),
        ("SECKILL_RESERVATION_DEADLINE_MS", "4500".to_string()),
        ("SECKILL_RECONCILE_INTERVAL_MS", "300".to_string()),
        ("SECKILL_SHUTDOWN_TIMEOUT_SECS", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[sqlx::test]
async fn killing_an_instance_mid_sale_loses_nothing_and_invents_nothing(db: PgPool) {
    let settings = test_settings(&db);
    let env = chaos_env(&settings);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let a = Instance::start(&env);
    let mut b = Instance::start(&env);
    a.wait_ready(&client).await;
    b.wait_ready(&client).await;

    let stock = 60;
    let item = create_item(&client, &a, stock).await;
    eventually(
        "instance b knows the item",
        Duration::from_secs(10),
        || async {
            let listing = json(client.get(b.url("/api/items")).send().await.ok()?).await;
            (listing["items"].as_array()?.len() == 1).then_some(())
        },
    )
    .await;

    let users: Vec<i64> = (1..=240).collect();
    let mut tokens = HashMap::new();
    for &user in &users {
        let response = client
            .post(a.url("/api/session"))
            .json(&serde_json::json!({ "userId": user }))
            .send()
            .await
            .unwrap();
        tokens.insert(
            user,
            json(response).await["token"].as_str().unwrap().to_string(),
        );
    }

    let (a_port, b_port) = (a.port, b.port);
    let buy = |user: i64| {
        let client = client.clone();
        let token = tokens[&user].clone();
        let port = if user % 2 == 0 { a_port } else { b_port };
        async move {
            let response = client
                .post(format!("http://127.0.0.1:{port}/seckill"))
                .bearer_auth(token)
                .header(
                    "X-Forwarded-For",
                    format!("10.30.{}.{}", user / 200, user % 200),
                )
                .json(&serde_json::json!({ "itemId": item }))
                .send()
                .await;
            let outcome = match response {
                Err(_) => Outcome::Unknown,
                Ok(r) if r.status() == 200 => match r.json::<serde_json::Value>().await {
                    Ok(body) => {
                        Outcome::Ordered(body["orderId"].as_str().unwrap_or_default().to_string())
                    }
                    Err(_) => Outcome::Unknown,
                },
                Ok(r) => Outcome::Refused(r.status().as_u16()),
            };
            (user, outcome)
        }
    };

    // First third, then SIGKILL b while requests are in flight, restart it, the rest.
    let mut outcomes = Vec::new();
    let (first, rest) = users.split_at(80);
    outcomes.extend(
        futures_util::stream::iter(first.iter().map(|&u| buy(u)))
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await,
    );
    let (middle, last) = rest.split_at(80);
    let mut in_flight =
        futures_util::stream::iter(middle.iter().map(|&u| buy(u))).buffer_unordered(16);
    let mut killed = false;
    while let Some(outcome) = in_flight.next().await {
        outcomes.push(outcome);
        if !killed && outcomes.len() >= 100 {
            b.kill();
            killed = true;
        }
    }
    drop(in_flight);
    b.spawn();
    b.wait_ready(&client).await;
    outcomes.extend(
        futures_util::stream::iter(last.iter().map(|&u| buy(u)))
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await,
    );

    let pending_key = item_keys(&settings.redis_key_prefix, item).pending();
    let mut conn = seckill_test_support::redis_connection(&settings).await;
    eventually(
        "every pending reservation is settled",
        Duration::from_secs(20),
        || {
            let mut conn = conn.clone();
            let key = pending_key.clone();
            async move {
                (redis::cmd("ZCARD")
                    .arg(key)
                    .query_async::<i64>(&mut conn)
                    .await
                    .ok()?
                    == 0)
                    .then_some(())
            }
        },
    )
    .await;

    let orders: Vec<(uuid::Uuid, i64)> =
        sqlx::query_as("SELECT id, user_id FROM orders WHERE item_id = $1")
            .bind(item)
            .fetch_all(&db)
            .await
            .unwrap();
    let ordered: HashMap<i64, String> = orders
        .iter()
        .map(|(id, user)| (*user, id.to_string()))
        .collect();
    assert!(
        orders.len() as i64 <= stock,
        "oversold: {} orders",
        orders.len()
    );
    assert_eq!(ordered.len(), orders.len(), "a user with two orders");

    let mut unknown = 0;
    for (user, outcome) in &outcomes {
        match outcome {
            Outcome::Ordered(order) => assert_eq!(
                ordered.get(user),
                Some(order),
                "user {user}'s 200 has its order"
            ),
            Outcome::Refused(status) => assert!(
                !ordered.contains_key(user) || *status == 503,
                "user {user} refused ({status}) but holds an order"
            ),
            Outcome::Unknown => unknown += 1,
        }
    }
    for user in ordered.keys() {
        let known = outcomes
            .iter()
            .any(|(u, o)| u == user && !matches!(o, Outcome::Refused(s) if *s != 503));
        assert!(known, "user {user} has an order nobody answered for");
    }

    let keys = item_keys(&settings.redis_key_prefix, item);
    let (stock_key, success_key) = (keys.stock(), keys.success());
    let redis_stock: i64 = redis::cmd("GET")
        .arg(&stock_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let remaining = pg_remaining(&db, item).await;
    assert_eq!(
        redis_stock + orders.len() as i64,
        stock,
        "redis stock agrees with postgres orders"
    );
    assert_eq!(
        i64::from(remaining),
        redis_stock,
        "redis and postgres agree on what is left"
    );
    let success: Option<i64> = redis::cmd("GET")
        .arg(&success_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        success.unwrap_or(0),
        orders.len() as i64,
        "the success counter counts real orders"
    );
    println!(
        "chaos: {} requests, {} orders of {stock}, {unknown} outcomes unknown to the client",
        outcomes.len(),
        orders.len()
    );
}

/// Creates an item through `instance`'s admin API and answers its id.
async fn create_item(client: &reqwest::Client, instance: &Instance, stock: i64) -> i64 {
    let now = chrono::Utc::now();
    let created = client
        .post(instance.url("/admin/api/items"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({
            "name": "Chaos", "priceCents": 1, "stock": stock,
            "startsAt": now - chrono::Duration::minutes(1), "endsAt": now + chrono::Duration::hours(1),
        }))
        .send()
        .await
        .unwrap();
    json(created).await["id"].as_i64().unwrap()
}

#[sqlx::test]
async fn killing_an_instance_with_a_full_commit_queue_leaves_no_order_half_made(db: PgPool) {
    let settings = test_settings(&db);
    let gate_user = 900_000;
    let mut env = chaos_env(&settings);
    let mut stalled_env = env.clone();
    // The committer stalls on the gate's batch, so every later order stays queued. The
    // queued purchases wait there until the kill, whatever sending them takes: with the
    // suite's 1 s commit budget, a loaded machine that took longer to send the 60 saw
    // the first leave the queue before the last arrived (never 50 queued). 8 s is eight
    // times that; the limiter's budget is out of reach, Redis's 2 s, nothing is shed.
    // The reservations carry the stalled instance's deadline (20 s, above the longest
    // its orders can take), which the survivor's reconciler waits out.
    stalled_env.push((
        "FAILPOINTS".into(),
        format!("committer::stall=return({gate_user})"),
    ));
    for (name, value) in [
        ("SECKILL_ORDER_COMMIT_TIMEOUT_MS", "8000"),
        ("SECKILL_REDIS_TIMEOUT_MS", "2000"),
        ("SECKILL_LIMITER__TIMEOUT_MS", "60000"),
        ("SECKILL_RESERVATION_DEADLINE_MS", "20000"),
        ("SECKILL_SHEDDING_ENABLED", "false"),
        // One worker thread, so one committer: every order queues behind the gate.
        ("SECKILL_WORKERS", "1"),
    ] {
        stalled_env.retain(|(k, _)| k != name);
        stalled_env.push((name.into(), value.into()));
    }
    env.push(("FAILPOINTS".into(), String::new()));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut stalled = Instance::start(&stalled_env);
    stalled.wait_ready(&client).await;
    let stock = 100;
    let item = create_item(&client, &stalled, stock).await;

    let mut tokens = Vec::new();
    // Ten orders commit normally; then the gate; then 60 more queue behind it.
    let before_gate = 10;
    for user in (1..=before_gate).chain([gate_user]).chain(11..=70) {
        let response = client
            .post(stalled.url("/api/session"))
            .json(&serde_json::json!({ "userId": user }))
            .send()
            .await
            .unwrap();
        let token = json(response).await["token"].as_str().unwrap().to_string();
        tokens.push((user, token));
    }
    let metric = |name: &'static str| {
        let client = client.clone();
        let url = stalled.url("/metrics");
        async move {
            let text = client.get(url).send().await.ok()?.text().await.ok()?;
            let line = text.lines().find(|l| l.starts_with(name))?;
            line.rsplit(' ').next()?.parse::<f64>().ok()
        }
    };
    let mut purchases = Vec::new();
    for (n, (user, token)) in tokens.into_iter().enumerate() {
        let client = client.clone();
        let url = stalled.url("/seckill");
        let purchase = tokio::spawn(async move {
            let response = client
                .post(url)
                .bearer_auth(token)
                .header(
                    "X-Forwarded-For",
                    format!("10.50.{}.{}", user / 200, user % 200),
                )
                .json(&serde_json::json!({ "itemId": item }))
                .send()
                .await;
            let order = match response {
                Ok(r) if r.status() == 200 => Some(
                    json(r).await["orderId"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                ),
                _ => None,
            };
            (user, order)
        });
        if n < before_gate as usize {
            let answer = purchase.await.unwrap();
            assert!(
                answer.1.is_some(),
                "user {} bought before the gate",
                answer.0
            );
            purchases.push(tokio::spawn(async move { answer }));
            continue;
        }
        purchases.push(purchase);
        if n == before_gate as usize {
            // The gate's order, alone: once the committer holds it, it stalls.
            eventually(
                "the committer holds the gate",
                Duration::from_secs(20),
                || async {
                    let batches = metric("seckill_commit_batch_size_count ").await?;
                    (batches > before_gate as f64).then_some(())
                },
            )
            .await;
        }
    }
    eventually(
        "50 orders wait in the commit queue",
        Duration::from_secs(20),
        || async { (metric("seckill_commit_queue_orders ").await? >= 50.0).then_some(()) },
    )
    .await;
    stalled.kill();
    let mut answered = Vec::new();
    for purchase in purchases {
        answered.push(purchase.await.unwrap());
    }

    // Another instance's reconciler settles what the dead one left pending.
    let survivor = Instance::start(&env);
    survivor.wait_ready(&client).await;
    seckill_test_support::until_nothing_pending(
        &settings,
        item,
        "every pending reservation is settled",
        Duration::from_secs(60),
    )
    .await;
    let prefix = &settings.redis_key_prefix;
    let conn = seckill_test_support::redis_connection(&settings).await;

    let orders: Vec<(uuid::Uuid,)> = sqlx::query_as("SELECT id FROM orders WHERE item_id = $1")
        .bind(item)
        .fetch_all(&db)
        .await
        .unwrap();
    let orders: Vec<String> = orders.into_iter().map(|(id,)| id.to_string()).collect();
    let keys = item_keys(prefix, item);
    let redis_int = |key: String| {
        let mut conn = conn.clone();
        async move {
            let value: Option<i64> = redis::cmd("GET")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            value.unwrap_or(0)
        }
    };
    assert_eq!(
        orders.len() as i64,
        before_gate,
        "exactly the orders made before the gate"
    );
    let sold_in_redis = stock - redis_int(keys.stock()).await;
    assert_eq!(
        (
            orders.len() as i64,
            sold_in_redis,
            redis_int(keys.success()).await
        ),
        (
            orders.len() as i64,
            orders.len() as i64,
            orders.len() as i64
        ),
        "postgres orders = units sold in redis = success counter"
    );
    assert_eq!(
        i64::from(pg_remaining(&db, item).await),
        stock - orders.len() as i64
    );
    for (user, order) in &answered {
        if let Some(order) = order {
            assert!(
                orders.contains(order),
                "user {user} holds a 200 without an order row"
            );
        }
    }
    println!(
        "chaos: {} purchases, {} orders committed before the kill, {} answered 200",
        answered.len(),
        orders.len(),
        answered.iter().filter(|(_, o)| o.is_some()).count()
    );
}

/// SIGTERM stops both servers (the service and its probe listener) and the process
/// exits. It used to hang when the service stopped first: the probe listener, still
/// draining a kept-alive connection (a Prometheus scrape's), was told to stop but no
/// longer polled, so its stop never completed.
#[sqlx::test]
async fn sigterm_stops_the_process_while_a_probe_connection_is_open(db: PgPool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let settings = test_settings(&db);
    let mut env = chaos_env(&settings);
    env.push(("SECKILL_SHUTDOWN_TIMEOUT_SECS".into(), "2".into()));
    env.push(("SECKILL_HEAD_TIMEOUT_MS".into(), "30000".into()));
    let client = reqwest::Client::new();
    for attempt in 1..=3 {
        let mut instance = Instance::start(&env);
        instance.wait_ready(&client).await;
        let mut scrape = tokio::net::TcpStream::connect(("127.0.0.1", instance.probe_port))
            .await
            .expect("the probe listener accepts");
        scrape
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut answer = [0u8; 64];
        let read = scrape.read(&mut answer).await.unwrap();
        assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
        let took = instance.terminate(Duration::from_secs(15)).await;
        assert!(
            took.is_some(),
            "attempt {attempt}: still running 15 s after SIGTERM"
        );
    }
}
