//! A Redis Cluster master dies in the middle of a sale.
//!
//! The test starts a cluster of its own (3 masters, 3 replicas, a 1 s node timeout so
//! the replica is promoted within seconds) through `scripts/services.sh cluster-up`,
//! sells from it at a steady rate, and SIGKILLs the master holding the item's slot.
//! Replication is asynchronous, so the dead master may take reservations its replica
//! never saw: Postgres is the record and the reconciler makes Redis agree with it. What
//! the test proves: purchases during the gap fail closed (503), purchases resume after
//! the promotion, and at the end there is no oversell, no lost or duplicated order, and
//! Redis agrees with Postgres.
//!
//! A test binary of its own: cargo runs test binaries one after another, so its seven
//! Redis processes and 150 purchases a second never share the two cores with the API
//! suite's parallel tests (they made a tight commit timeout there fail).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use seckill::configuration::Settings;
use seckill_test_support::{
    redis_connection, spawn_app_from, test_settings, until_redis_agrees_with_postgres,
};
use secrecy::SecretString;
use sqlx::PgPool;

/// Its own ports (and bus ports +10000), away from the development cluster's 7001-7006.
const FIRST_PORT: u16 = 7301;

/// A throw-away cluster, stopped and wiped when dropped.
struct OwnCluster {
    dir: tempfile::TempDir,
}

impl OwnCluster {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let cluster = Self { dir };
        let output = cluster
            .services("cluster-up", &[])
            .output()
            .expect("scripts/services.sh runs");
        assert!(
            output.status.success(),
            "cluster-up failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        cluster
    }

    fn services(&self, command: &str, args: &[&str]) -> Command {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/services.sh");
        let mut services = Command::new(script);
        services
            .arg(command)
            .args(args)
            .env("SECKILL_LOCAL_CLUSTER_PORT", FIRST_PORT.to_string())
            .env("SECKILL_LOCAL_CLUSTER_NODE_TIMEOUT_MS", "1000")
            .env("SECKILL_LOCAL_CLUSTER_DIR", self.dir.path());
        services
    }

    fn nodes(&self) -> String {
        (FIRST_PORT..FIRST_PORT + 6)
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn pid_file(&self, port: u16) -> PathBuf {
        self.dir.path().join(port.to_string()).join("redis.pid")
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = self.services("cluster-down", &["--wipe"]).output();
    }
}

/// The port of the master serving `key`'s slot, from `CLUSTER SLOTS` of any live node.
async fn master_port_of(settings: &Settings, key: &str) -> u16 {
    let mut conn = redis_connection(settings).await;
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(&mut conn)
        .await
        .expect("CLUSTER KEYSLOT");
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await
        .expect("CLUSTER SLOTS");
    for range in ranges {
        let redis::Value::Array(parts) = range else {
            continue;
        };
        let (Some(redis::Value::Int(from)), Some(redis::Value::Int(to))) =
            (parts.first(), parts.get(1))
        else {
            continue;
        };
        if (*from..=*to).contains(&slot) {
            if let Some(redis::Value::Array(master)) = parts.get(2) {
                if let Some(redis::Value::Int(port)) = master.get(1) {
                    return u16::try_from(*port).expect("a port");
                }
            }
        }
    }
    panic!("no master serves slot {slot}");
}

/// One purchase's answer and when it came, in ms since the start of the sale.
struct Answer {
    user: i64,
    at_ms: u128,
    status: u16,
    order_id: Option<String>,
}

#[sqlx::test]
async fn a_master_killed_mid_sale_fails_purchases_closed_then_they_resume_and_nothing_is_lost(
    db: PgPool,
) {
    let cluster = OwnCluster::start();
    let mut settings = test_settings(&db);
    settings.redis_cluster_nodes = SecretString::from(cluster.nodes());
    settings.reconcile_interval_ms = 300;
    settings.reservation_deadline_ms = 5_000;
    settings.order_commit_timeout_ms = 1_000;
    settings.database_statement_timeout_ms = 1_000;
    settings.database_idle_in_transaction_timeout_ms = 1_000;
    // What is tested is the failover: a slow window on a loaded machine must not shed
    // purchases (503 `OVERLOADED`) that the checks below would count as its failures.
    settings.shedding_enabled = false;
    let app = spawn_app_from(settings).await;
    let stock = 2_000;
    let item = app.open_item(stock).await;

    // 1200 purchases of distinct users from distinct addresses, 150 a second: under the
    // `api` limit, so only the failover can refuse them.
    let purchases = 1_200;
    let tokens = app.tokens(1..=purchases as i64).await;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / 150));
    let mut inflight = tokio::task::JoinSet::new();
    let mut killed_at_ms = None;
    for (user, token) in tokens {
        tick.tick().await;
        if killed_at_ms.is_none() && started.elapsed() > Duration::from_secs(2) {
            let port = master_port_of(&app.settings, &app.item_keys(item).stock()).await;
            let pid = std::fs::read_to_string(cluster.pid_file(port)).expect("the master's pid");
            let killed = Command::new("kill")
                .args(["-KILL", pid.trim()])
                .status()
                .expect("kill runs");
            assert!(killed.success(), "SIGKILL the master on {port}");
            killed_at_ms = Some(started.elapsed().as_millis());
        }
        let client = app.client.clone();
        let url = app.url("/seckill");
        inflight.spawn(async move {
            let response = client
                .post(url)
                .bearer_auth(token)
                .header(
                    "X-Forwarded-For",
                    format!("10.77.{}.{}", user / 250, user % 250),
                )
                .json(&serde_json::json!({ "itemId": item }))
                .send()
                .await
                .expect("the app answers");
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            Answer {
                user,
                at_ms: started.elapsed().as_millis(),
                status,
                order_id: body["orderId"].as_str().map(str::to_string),
            }
        });
    }
    let mut answers = Vec::with_capacity(purchases);
    while let Some(answer) = inflight.join_next().await {
        answers.push(answer.expect("a purchase task"));
    }
    let killed_at_ms = killed_at_ms.expect("the master was killed");

    // Only orders and closed failures: never a 500, never a limiter refusal.
    let unexpected: Vec<u16> = answers
        .iter()
        .map(|a| a.status)
        .filter(|s| ![200, 202, 503].contains(s))
        .collect();
    assert!(unexpected.is_empty(), "unexpected answers: {unexpected:?}");
    let first_failure = answers
        .iter()
        .filter(|a| a.status == 503 && a.at_ms >= killed_at_ms)
        .map(|a| a.at_ms)
        .min()
        .expect("purchases during the gap fail closed (503)");
    let resumed = answers
        .iter()
        .filter(|a| a.status == 200 && a.at_ms > first_failure)
        .map(|a| a.at_ms)
        .min()
        .expect("purchases resume after the replica's promotion");
    eprintln!(
        "failover: master killed at {killed_at_ms} ms, first 503 at {first_failure} ms, \
         first order after it at {resumed} ms; {} answers 200, {} 503, {} 202",
        answers.iter().filter(|a| a.status == 200).count(),
        answers.iter().filter(|a| a.status == 503).count(),
        answers.iter().filter(|a| a.status == 202).count(),
    );

    // After one reconciler round: every 200 has its order, nothing is oversold or
    // doubled, and Redis says what Postgres says.
    let ordered: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    for answer in &ordered {
        let id = answer.order_id.as_deref().expect("a 200 names its order");
        let found: Option<i64> =
            sqlx::query_scalar("SELECT user_id FROM orders WHERE id = $1::text::uuid")
                .bind(id)
                .fetch_optional(&db)
                .await
                .expect("the order lookup");
        assert_eq!(
            found,
            Some(answer.user),
            "order {id} of a 200 is in Postgres"
        );
    }
    let doubled: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT user_id FROM orders WHERE item_id = $1 \
         GROUP BY user_id HAVING count(*) > 1) d",
    )
    .bind(item)
    .fetch_one(&db)
    .await
    .expect("the doubles count");
    assert_eq!(doubled, 0, "no user has two orders");
    let (state, _) =
        until_redis_agrees_with_postgres(&app, &db, item, Duration::from_secs(30)).await;
    let (orders, remaining) = state;
    assert_eq!(
        orders + remaining,
        stock,
        "every unit is sold or left, once"
    );
    assert!(
        orders >= ordered.len() as i64,
        "{orders} orders for {} answers 200",
        ordered.len()
    );
}
