//! A Redis master watched by Sentinel dies in the middle of a sale.
//!
//! The test starts a Sentinel set of its own (one master, one replica, three sentinels,
//! quorum 2, `down-after-milliseconds` 1000, so the replica is promoted within seconds)
//! through `scripts/services.sh sentinel-up`, runs the app on it
//! (`redis_sentinels`), sells at a steady rate and SIGKILLs the master. Replication is
//! asynchronous, so the dead master may take reservations its replica never saw:
//! Postgres is the record and the reconciler makes Redis agree with it. What the test
//! proves: purchases during the gap fail closed (503 `LIMITER_UNAVAILABLE` or
//! `ORDER_FAILED`, never a 500), they resume after the promotion on every worker, and at
//! the end there is no oversell, no lost, invented or duplicated order, and Redis agrees
//! with Postgres. It prints the time from the kill to the first order after the gap.
//!
//! A second test stops the master instead (SIGSTOP: a partition, a hung process). No
//! call then fails with an error; each is abandoned at its timeout, and the store must
//! ask the sentinels by itself whether the master moved.
//!
//! A test binary of its own, like `tests/cluster_failover.rs`: cargo runs test binaries
//! one after another, so its Redis processes and 150 purchases a second never share the
//! two cores with the API suite's parallel tests.

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seckill::domain::UserId;
use seckill::identity::{TokenKeys, TokenRules};
use seckill::store::redis_store::RedisOptions;
use seckill::store::RedisStore;
use seckill_test_support::{
    eventually, spawn_app_from, test_settings, until_redis_agrees_with_postgres,
};
use secrecy::SecretString;
use sqlx::PgPool;

/// Each test's own ports: the master, the replica, then the three sentinels. Away from
/// the development set's 6391-6395, the clusters' 7001-7006, 7301-7306
/// (tests/cluster_failover.rs) and 7401-7406 (`make bench`), and their bus ports.
const SALE_PORT: u16 = 7501;
const HUNG_PORT: u16 = 7511;
const MASTER_NAME: &str = "seckill-failover";

/// Purchases a second, from distinct users and addresses: under the `api` limit, so
/// only the failover can refuse them.
const RATE: u64 = 150;
/// When the master dies, after the sale started.
const KILL_AFTER: Duration = Duration::from_secs(2);
/// How long the sale goes on once purchases have resumed, to see every worker back.
const AFTER_RESUME: Duration = Duration::from_millis(1_500);
/// The longest the sale may last: the failover must be over well before.
const LONGEST_SALE: Duration = Duration::from_secs(14);

/// A throw-away Sentinel set, stopped and wiped when dropped.
struct OwnSentinels {
    dir: tempfile::TempDir,
    first_port: u16,
}

impl OwnSentinels {
    fn start(first_port: u16) -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let set = Self { dir, first_port };
        let output = set
            .services("sentinel-up", &[])
            .output()
            .expect("scripts/services.sh runs");
        assert!(
            output.status.success(),
            "scripts/services.sh sentinel-up failed (it installs Debian's redis-sentinel when \
             missing, or runs the sentinels as redis-server --sentinel): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        set
    }

    fn services(&self, command: &str, args: &[&str]) -> Command {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/services.sh");
        let mut services = Command::new(script);
        services
            .arg(command)
            .args(args)
            .env("SECKILL_LOCAL_SENTINEL_PORT", self.first_port.to_string())
            .env("SECKILL_LOCAL_SENTINEL_MASTER", MASTER_NAME)
            .env("SECKILL_LOCAL_SENTINEL_DOWN_AFTER_MS", "1000")
            .env("SECKILL_LOCAL_SENTINEL_FAILOVER_TIMEOUT_MS", "2000")
            .env("SECKILL_LOCAL_SENTINEL_DIR", self.dir.path());
        services
    }

    fn sentinels(&self) -> String {
        (self.first_port + 2..self.first_port + 5)
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The port of the master, as the first sentinel names it.
    async fn master_port(&self) -> u16 {
        let sentinel = redis::Client::open(format!("redis://127.0.0.1:{}", self.first_port + 2))
            .expect("a sentinel URL");
        let mut conn = sentinel
            .get_multiplexed_async_connection()
            .await
            .expect("the sentinel answers");
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME)
            .query_async(&mut conn)
            .await
            .expect("the sentinel names the master");
        port
    }

    fn pid(&self, port: u16) -> String {
        let file = self.dir.path().join(port.to_string()).join("redis.pid");
        std::fs::read_to_string(file)
            .expect("the server's pid file")
            .trim()
            .to_string()
    }

    /// Sends `signal` to the server on `port`.
    fn signal(&self, signal: &str, port: u16) {
        let sent = Command::new("kill")
            .args([signal, &self.pid(port)])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill {signal} the server on {port}");
    }
}

impl Drop for OwnSentinels {
    fn drop(&mut self) {
        // A server a failed test left stopped would hold sentinel-down up for 15 s.
        for port in self.first_port..self.first_port + 2 {
            if let Ok(pid) =
                std::fs::read_to_string(self.dir.path().join(port.to_string()).join("redis.pid"))
            {
                let _ = Command::new("kill").args(["-CONT", pid.trim()]).status();
            }
        }
        let _ = self.services("sentinel-down", &["--wipe"]).output();
    }
}

/// One purchase's answer: when it was sent and came back, in ms since the sale started.
struct Answer {
    user: i64,
    sent_ms: u128,
    at_ms: u128,
    status: u16,
    code: String,
    order_id: Option<String>,
}

/// What the sale has seen so far, for deciding when it has seen enough.
#[derive(Default)]
struct Seen {
    first_failure_ms: Option<u128>,
    resumed_ms: Option<u128>,
}

#[sqlx::test]
async fn a_sentinel_master_killed_mid_sale_fails_purchases_closed_then_they_resume_and_nothing_is_lost(
    db: PgPool,
) {
    let set = OwnSentinels::start(SALE_PORT);
    let mut settings = test_settings(&db);
    settings.redis_sentinels = SecretString::from(set.sentinels());
    settings.redis_sentinel_master = MASTER_NAME.into();
    settings.reconcile_interval_ms = 300;
    settings.reservation_deadline_ms = 5_000;
    settings.order_commit_timeout_ms = 1_000;
    settings.database_statement_timeout_ms = 1_000;
    settings.database_idle_in_transaction_timeout_ms = 1_000;
    // A SIGKILLed master refuses at once, so the gap's calls fail fast whatever their
    // budget; a budget a loaded machine can spend (the default 250 ms) would add
    // refusals after the promotion that no stuck worker caused.
    settings.limiter.timeout_ms = 10_000;
    // What is tested is the failover: a slow window on a loaded machine must not shed
    // purchases (503 `OVERLOADED`) that the checks below would count as its failures.
    settings.shedding_enabled = false;
    // Tokens signed here with the app's key, as its dev login would: the sale's pace
    // is then the test's, not the sign-in's.
    let keys = TokenKeys::new(
        &settings.jwt_secret,
        TokenRules {
            ttl: Duration::from_secs(settings.token_ttl_secs),
            max_lifetime: Duration::from_secs(settings.token_max_lifetime_secs),
            issuer: None,
            audience: None,
        },
    )
    .expect("token keys");
    let app = spawn_app_from(settings).await;
    let stock = 2_500;
    let item = app.open_item(stock).await;
    let doomed = set.master_port().await;

    let started = Instant::now();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    let mut inflight = tokio::task::JoinSet::new();
    let mut killed_at_ms = None;
    let mut user = 0_i64;
    loop {
        tick.tick().await;
        let resumed = seen.lock().expect("seen").resumed_ms;
        if resumed.is_some_and(|at| started.elapsed().as_millis() > at + AFTER_RESUME.as_millis())
            || started.elapsed() > LONGEST_SALE
        {
            break;
        }
        if killed_at_ms.is_none() && started.elapsed() > KILL_AFTER {
            set.signal("-KILL", doomed);
            killed_at_ms = Some(started.elapsed().as_millis());
        }
        user += 1;
        let token = keys
            .issue(UserId::try_from(user).expect("a user id"))
            .expect("a token")
            .token;
        let client = app.client.clone();
        let url = app.url("/seckill");
        let seen = Arc::clone(&seen);
        let after_kill = killed_at_ms.is_some();
        inflight.spawn(async move {
            let sent_ms = started.elapsed().as_millis();
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
            let at_ms = started.elapsed().as_millis();
            {
                let mut seen = seen.lock().expect("seen");
                if status == 503 && after_kill && seen.first_failure_ms.is_none() {
                    seen.first_failure_ms = Some(at_ms);
                }
                if status == 200 && seen.first_failure_ms.is_some_and(|f| sent_ms > f) {
                    seen.resumed_ms.get_or_insert(at_ms);
                }
            }
            Answer {
                user,
                sent_ms,
                at_ms,
                status,
                code: body["code"].as_str().unwrap_or_default().to_string(),
                order_id: body["orderId"].as_str().map(str::to_string),
            }
        });
    }
    let mut answers = Vec::new();
    while let Some(answer) = inflight.join_next().await {
        answers.push(answer.expect("a purchase task"));
    }
    let killed_at_ms = killed_at_ms.expect("the master was killed");

    // Only orders and closed failures: never a 500, never a limiter refusal.
    let unexpected: Vec<(u16, &str)> = answers
        .iter()
        .filter(|a| match a.status {
            200 | 202 => false,
            503 => !["LIMITER_UNAVAILABLE", "ORDER_FAILED"].contains(&a.code.as_str()),
            _ => true,
        })
        .map(|a| (a.status, a.code.as_str()))
        .collect();
    assert!(unexpected.is_empty(), "unexpected answers: {unexpected:?}");
    let Seen {
        first_failure_ms,
        resumed_ms,
    } = *seen.lock().expect("seen");
    let first_failure = first_failure_ms.expect("purchases during the gap fail closed (503)");
    let resumed = resumed_ms.unwrap_or_else(|| {
        panic!("purchases resume after the replica's promotion, within {LONGEST_SALE:?} of the sale's start")
    });
    // Every worker found the new master: after the first new order, some run of
    // `IN_A_ROW` purchases, in the order they were sent, all answered 200. One worker of
    // the two still calling the dead master fails about every other purchase, and makes
    // such a run as likely as that many heads in a row (under 1 in 10 000 over the
    // purchases after the promotion); a loaded machine's occasional slow commit
    // (`ORDER_FAILED`) only breaks a run, it cannot fail every run. Counts, not a time:
    // a share of late failures once failed on a loaded machine.
    const IN_A_ROW: usize = 20;
    let mut after_resume: Vec<&Answer> = answers.iter().filter(|a| a.sent_ms > resumed).collect();
    after_resume.sort_by_key(|a| a.sent_ms);
    let longest_run = after_resume
        .iter()
        .fold((0, 0), |(run, longest), a| {
            let run = if a.status == 200 { run + 1 } else { 0 };
            (run, longest.max(run))
        })
        .1;
    let late_failures: Vec<(u128, &str)> = after_resume
        .iter()
        .filter(|a| a.status == 503)
        .map(|a| (a.sent_ms, a.code.as_str()))
        .collect();
    assert!(
        longest_run >= IN_A_ROW,
        "after the first new order, at most {longest_run} purchases in a row answered 200 \
         ({} of {} failed: {late_failures:?})",
        late_failures.len(),
        after_resume.len()
    );
    let count = |status: u16| answers.iter().filter(|a| a.status == status).count();
    let count_code = |code: &str| answers.iter().filter(|a| a.code == code).count();
    eprintln!(
        "sentinel failover: master killed at {killed_at_ms} ms, first 503 at {first_failure} ms, \
         first order after it at {resumed} ms: time to resume {} ms; {} purchases: {} answers \
         200, {} 503 ({} LIMITER_UNAVAILABLE, {} ORDER_FAILED), {} 202; {} of the {} sent \
         after the first new order failed, {longest_run} in a row answered 200; the last \
         answered at {} ms",
        resumed - killed_at_ms,
        answers.len(),
        count(200),
        count(503),
        count_code("LIMITER_UNAVAILABLE"),
        count_code("ORDER_FAILED"),
        count(202),
        late_failures.len(),
        after_resume.len(),
        answers.iter().map(|a| a.at_ms).max().unwrap_or(0),
    );

    // Every 200 has its order; every order is a 200's or a 202's (a 503 is never an
    // order); nobody has two.
    let orders: Vec<(String, i64)> =
        sqlx::query_as("SELECT id::text, user_id FROM orders WHERE item_id = $1")
            .bind(item)
            .fetch_all(&db)
            .await
            .expect("the orders");
    let ordered: HashSet<(String, i64)> = answers
        .iter()
        .filter(|a| a.status == 200)
        .map(|a| (a.order_id.clone().expect("a 200 names its order"), a.user))
        .collect();
    let in_postgres: HashSet<(String, i64)> = orders.iter().cloned().collect();
    let lost: Vec<_> = ordered.difference(&in_postgres).collect();
    assert!(
        lost.is_empty(),
        "orders answered 200 and not in Postgres: {lost:?}"
    );
    let may_have: BTreeSet<i64> = answers
        .iter()
        .filter(|a| [200, 202].contains(&a.status))
        .map(|a| a.user)
        .collect();
    let invented: Vec<i64> = orders
        .iter()
        .map(|(_, user)| *user)
        .filter(|user| !may_have.contains(user))
        .collect();
    assert!(
        invented.is_empty(),
        "orders of users answered neither 200 nor 202: {invented:?}"
    );
    let buyers: BTreeSet<i64> = orders.iter().map(|(_, user)| *user).collect();
    assert_eq!(buyers.len(), orders.len(), "no user has two orders");

    // After a reconciler round Redis says what Postgres says: stock, success counter,
    // nothing pending. Read through the sentinels, as the app does.
    let ((orders, remaining), took) =
        until_redis_agrees_with_postgres(&app, &db, item, Duration::from_secs(10)).await;
    eprintln!(
        "sentinel failover: Redis agreed with Postgres {} ms after the sale",
        took.as_millis()
    );
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

/// The port of the server `conn` reaches.
async fn port_behind(
    conn: &mut seckill::store::redis_store::RedisConnection,
) -> redis::RedisResult<u16> {
    let (_, port): (String, u16) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("port")
        .query_async(conn)
        .await?;
    Ok(port)
}

#[tokio::test]
async fn calls_left_unanswered_by_a_hung_master_move_to_the_one_the_sentinels_promote() {
    let set = OwnSentinels::start(HUNG_PORT);
    let options = RedisOptions {
        url: SecretString::from("redis://127.0.0.1"),
        cluster_nodes: Vec::new(),
        sentinels: set
            .sentinels()
            .split(',')
            .map(|url| SecretString::from(url.to_string()))
            .collect(),
        sentinel_master: MASTER_NAME.into(),
        key_prefix: "test".into(),
        limiter_timeout: Duration::from_millis(250),
        timeout: Duration::from_millis(500),
    };
    let mut conn = RedisStore::connect_raw(&options)
        .await
        .expect("the sentinels name a master");
    let first = set.master_port().await;
    assert_eq!(
        port_behind(&mut conn).await.expect("the master answers"),
        first
    );

    // Stopped, not killed: its sockets stay open and no call gets an error back.
    set.signal("-STOP", first);
    let stopped = Instant::now();
    let unanswered = tokio::time::timeout(Duration::from_millis(250), port_behind(&mut conn)).await;
    assert!(unanswered.is_err(), "a stopped master answers nothing");

    // Each call is cut at 250 ms, as the store's timeout would; the promoted replica
    // must answer one of them.
    let (port, _) = eventually(
        "a call answered by the promoted replica",
        Duration::from_secs(15),
        || {
            let mut conn = conn.clone();
            async move {
                tokio::time::timeout(Duration::from_millis(250), port_behind(&mut conn))
                    .await
                    .ok()?
                    .ok()
            }
        },
    )
    .await;
    let took = stopped.elapsed();
    set.signal("-KILL", first);
    assert_ne!(port, first, "answered by the stopped master");
    assert_eq!(
        port,
        set.master_port().await,
        "answered by the master the sentinels name"
    );
    eprintln!(
        "sentinel failover, hung master: calls reached the promoted replica {} ms after the stop",
        took.as_millis()
    );
}
