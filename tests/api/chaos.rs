//! A sale driven at two real processes while one is killed with SIGKILL and restarted.
//! Afterwards Redis and Postgres agree, nothing is oversold, every 200 has its order,
//! and every order belongs to a 200 or to an answer the client never got.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures_util::StreamExt;
use secrecy::ExposeSecret;
use sqlx::PgPool;

use crate::helpers::{eventually, json, pg_remaining, test_settings, ADMIN_TOKEN};

/// One `seckill` process on a fixed port; killed when dropped.
struct Instance {
    port: u16,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Instance {
    fn start(env: &[(String, String)]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut instance = Self {
            port,
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

#[sqlx::test]
async fn killing_an_instance_mid_sale_loses_nothing_and_invents_nothing(db: PgPool) {
    let settings = test_settings(&db);
    let env: Vec<(String, String)> = [
        (
            "DATABASE_URL",
            settings.database_url.expose_secret().to_string(),
        ),
        ("REDIS_URL", settings.redis_url.expose_secret().to_string()),
        (
            "SECKILL_REDIS_KEY_PREFIX",
            settings.redis_key_prefix.clone(),
        ),
        ("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
        ("SECKILL_WORKERS", "2".to_string()),
        ("SECKILL_LOG_LEVEL", "warn".to_string()),
        ("SECKILL_ORDER_COMMIT_TIMEOUT_MS", "1000".to_string()),
        ("SECKILL_RESERVATION_DEADLINE_MS", "1500".to_string()),
        ("SECKILL_RECONCILE_INTERVAL_MS", "300".to_string()),
        ("SECKILL_SHUTDOWN_TIMEOUT_SECS", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let a = Instance::start(&env);
    let mut b = Instance::start(&env);
    a.wait_ready(&client).await;
    b.wait_ready(&client).await;

    let stock = 60;
    let now = chrono::Utc::now();
    let created = client
        .post(a.url("/admin/api/items"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({
            "name": "Chaos", "priceCents": 1, "stock": stock,
            "startsAt": now - chrono::Duration::minutes(1), "endsAt": now + chrono::Duration::hours(1),
        }))
        .send()
        .await
        .unwrap();
    let item = json(created).await["id"].as_i64().unwrap();
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

    let pending_key = format!("{}:{{item:{item}}}:pending", settings.redis_key_prefix);
    let redis_client = redis::Client::open(settings.redis_url.expose_secret()).unwrap();
    let mut conn = redis_client
        .get_multiplexed_async_connection()
        .await
        .unwrap();
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

    let stock_key = format!("{}:{{item:{item}}}:stock", settings.redis_key_prefix);
    let success_key = format!("{}:{{item:{item}}}:success", settings.redis_key_prefix);
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
