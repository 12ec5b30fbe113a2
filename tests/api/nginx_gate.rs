//! The NGINX gate (issue 40): a real nginx (Debian's, two workers) running the shipped
//! deploy/nginx/gate.conf in front of a trivial upstream, with two app instances as its
//! decision service; and the decision endpoint asked directly.
//!
//! Written in Rust rather than as a script: the instances are `TestApp`s (own database,
//! key prefix, ports from the OS), the upstream is a few lines of tokio here, and the
//! assertions read the same as every other API test's. nginx gets its own prefix folder
//! and the shipped file with its hosts, ports, secret and paths rewritten; a missing
//! nginx is installed (scripts/install-nginx.sh) or the test fails, never skips.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::{Method, Response};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use seckill::configuration::Settings;
use seckill::startup::Application;
use seckill_test_support::{eventually, json, spawn_app_with, use_own_redis, OwnRedis, TestApp};

const SECRET: &str = "nginx-gate-test-secret";
/// The domain gate.conf names.
const DOMAIN: &str = "nginx_gate";

/// `requests` a day per client address, on a token bucket: no window boundary can fall
/// inside the test and admit more.
fn per_address(domain: &str, requests: u32, fail_mode: &str) -> Value {
    json!({
        "domain": domain,
        "algorithm": "token_bucket",
        "fail_mode": fail_mode,
        "descriptors": [{
            "key": "remote_address",
            "rate_limit": { "unit": "day", "requests_per_unit": requests }
        }]
    })
}

fn gated(s: &mut Settings) {
    s.gate_port = Some(0);
    s.gate_secret = secrecy::SecretString::from(SECRET);
}

/// Stores `document` through `app` and waits until every instance in `all` has this
/// version in force.
async fn put_domain(app: &TestApp, all: &[&TestApp], document: Value) {
    let domain = document["domain"].as_str().expect("a domain").to_string();
    let stored = app
        .rls_domain(Method::PUT, &domain, Some(document), None)
        .await;
    assert!(stored.status().is_success(), "{:?}", stored.status());
    let version: i64 = header(&stored, "etag")
        .trim_matches('"')
        .parse()
        .expect("a numeric ETag");
    for instance in all {
        eventually("the domain in force", Duration::from_secs(5), || async {
            let current = instance.domains.current(&domain)?;
            (current.version == version).then_some(())
        })
        .await;
    }
}

/// One request as the upstream saw it: its path and its header names.
type Seen = Arc<Mutex<Vec<(String, Vec<String>)>>>;

/// The protected upstream: answers every request `200 upstream`, noting it.
async fn upstream() -> (SocketAddr, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = listener.local_addr().expect("an address");
    let seen: Seen = Arc::default();
    let noted = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let noted = Arc::clone(&noted);
            tokio::spawn(async move {
                let mut stream = BufReader::new(stream);
                let mut line = String::new();
                if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                let mut names = Vec::new();
                loop {
                    line.clear();
                    if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    match line.trim_end().split_once(':') {
                        Some((name, _)) => names.push(name.to_ascii_lowercase()),
                        None => break,
                    }
                }
                noted.lock().expect("not poisoned").push((path, names));
                let _ = stream
                    .get_mut()
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nupstream",
                    )
                    .await;
            });
        }
    });
    (address, seen)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn nginx_binary() -> PathBuf {
    let find = || {
        ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    };
    if let Some(found) = find() {
        return found;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new("bash")
        .arg(root.join("scripts/install-nginx.sh"))
        .status()
        .expect("scripts/install-nginx.sh runs");
    assert!(status.success(), "scripts/install-nginx.sh failed");
    find().expect("nginx installed")
}

/// A real nginx running the shipped gate.conf from a folder of its own.
struct Nginx {
    dir: tempfile::TempDir,
    child: Child,
    port: u16,
}

impl Nginx {
    async fn start(upstream: SocketAddr, gates: [&str; 2]) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let shipped = std::fs::read_to_string(root.join("deploy/nginx/gate.conf"))
            .expect("deploy/nginx/gate.conf");
        let dir = tempfile::tempdir().expect("a folder");
        let d = dir.path().display();
        let port = free_port();
        let gate = |address: &str| address.trim_start_matches("http://").to_string();
        let rewrites = [
            ("worker_processes auto;", "worker_processes 2;".to_string()),
            ("pid /tmp/nginx-gate.pid;", format!("pid {d}/nginx.pid;")),
            (
                "error_log /dev/stderr warn;",
                format!("error_log {d}/error.log warn;"),
            ),
            (
                "access_log /dev/stdout;",
                // Which worker answered and which instance decided, for the test.
                format!(
                    "log_format gate '$pid $upstream_addr'; log_subrequest on; \
                     access_log {d}/access.log gate; client_body_temp_path {d}/body; \
                     proxy_temp_path {d}/proxy;"
                ),
            ),
            // `reuseport`: a socket per worker, the kernel spreading connections over
            // them by address and port, so that both workers take a share.
            ("listen 80;", format!("listen 127.0.0.1:{port} reuseport;")),
            ("server upstream:8000;", format!("server {upstream};")),
            ("server app1:8090", format!("server {}", gate(gates[0]))),
            ("server app2:8090", format!("server {}", gate(gates[1]))),
            ("\"${SECKILL_GATE_SECRET}\"", format!("\"{SECRET}\"")),
        ];
        let mut conf = shipped;
        for (from, to) in rewrites {
            assert!(conf.contains(from), "gate.conf has no `{from}` to rewrite");
            conf = conf.replace(from, &to);
        }
        let file = dir.path().join("nginx.conf");
        std::fs::write(&file, conf).expect("the config written");
        let child = Command::new(nginx_binary())
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&file)
            .args(["-e", &format!("{d}/error.log"), "-g", "daemon off;"])
            .stdin(Stdio::null())
            .spawn()
            .expect("nginx starts");
        let nginx = Self { dir, child, port };
        eventually("nginx listening", Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        nginx
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        let mut request = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("a client")
            .get(format!("http://127.0.0.1:{}{path}", self.port));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.expect("nginx answers")
    }

    /// The workers that answered and the addresses they proxied to (the instances,
    /// the upstream), from the access log.
    fn workers_and_addresses(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let log = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        let mut workers = BTreeSet::new();
        let mut addresses = BTreeSet::new();
        for line in log.lines() {
            let mut fields = line.split(' ');
            workers.extend(fields.next().map(str::to_string));
            addresses.extend(
                fields
                    .next()
                    .into_iter()
                    .flat_map(|a| a.split(", "))
                    .map(str::to_string),
            );
        }
        (workers, addresses)
    }

    fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM, so the master stops its workers (a SIGKILL would leave them).
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn header<'a>(response: &'a Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no {name} header"))
}

#[sqlx::test]
async fn exactly_the_limit_passes_nginx_over_two_instances_and_a_stopped_gate_does_what_each_location_says(
    db: PgPool,
) {
    const LIMIT: usize = 10;
    let first = spawn_app_with(&db, gated).await;
    let prefix = first.settings.redis_key_prefix.clone();
    let second = spawn_app_with(&db, |s| {
        gated(s);
        s.redis_key_prefix = prefix;
    })
    .await;
    put_domain(
        &first,
        &[&first, &second],
        per_address(DOMAIN, LIMIT as u32, "open"),
    )
    .await;
    let (upstream, seen) = upstream().await;
    let gates = [&first, &second].map(|app| app.gate_address.as_deref().expect("a gate"));
    let nginx = Nginx::start(upstream, gates).await;

    // Three times the limit at once, half of them with the gate's headers forged: they
    // change nothing (NGINX overwrites them to the gate and strips them to the upstream).
    let forged = [
        ("X-Gate-Secret", "wrong"),
        ("X-Gate-Domain", "other"),
        ("X-Gate-Descriptor", "remote_address=10.9.9.9"),
        ("X-Api-Key", "a&remote_address=10.9.9.8"),
    ];
    let answers = futures_util::future::join_all((0..3 * LIMIT).map(|i| {
        let nginx = &nginx;
        let path = if i % 3 == 0 { "/page" } else { "/api/items" };
        let headers: &[(&str, &str)] = if i % 2 == 0 { &forged } else { &[] };
        async move { nginx.get(path, headers).await }
    }))
    .await;
    let (admitted, refused): (Vec<_>, Vec<_>) =
        answers.into_iter().partition(|r| r.status() == 200);
    assert_eq!(admitted.len(), LIMIT, "{}", nginx.error_log());
    for response in &refused {
        assert_eq!(response.status(), 429);
        assert!(
            header(response, "retry-after")
                .parse::<u64>()
                .expect("seconds")
                > 0
        );
        assert!(header(response, "ratelimit").contains(";r=0;"));
        assert!(header(response, "ratelimit-policy").contains(&format!("q={LIMIT}")));
    }
    let (workers, addresses) = nginx.workers_and_addresses();
    assert_eq!(workers.len(), 2, "both workers answered: {workers:?}");
    for gate in gates {
        let gate = gate.trim_start_matches("http://");
        assert!(
            addresses.contains(gate),
            "{gate} decided none: {addresses:?}"
        );
    }
    {
        let seen = seen.lock().expect("not poisoned");
        assert_eq!(
            seen.len(),
            LIMIT,
            "the upstream saw only the admitted requests"
        );
        for (path, names) in seen.iter() {
            assert!(
                !names.iter().any(|n| n.starts_with("x-gate-")),
                "{path}: a gate header reached the upstream: {names:?}"
            );
        }
    }

    // No ordinary location reaches the decision endpoint: /_gate is internal, /decide is
    // the upstream's path (refused here: the limit is spent), never the gate's answer.
    assert_eq!(nginx.get("/_gate", &forged).await.status(), 404);
    let decide = nginx.get("/decide", &[("X-Gate-Secret", SECRET)]).await;
    assert_eq!(decide.status(), 429);
    assert_eq!(seen.lock().expect("not poisoned").len(), LIMIT);

    // The decision service stopped: /api/ fails closed (503), / fails open (proxied).
    drop((first, second));
    let (refused, _) = eventually("/api/ refused", Duration::from_secs(10), || async {
        let response = nginx.get("/api/items", &[]).await;
        (response.status() == 503).then_some(response)
    })
    .await;
    assert_eq!(header(&refused, "retry-after"), "1");
    let allowed = nginx.get("/page", &[]).await;
    assert_eq!(allowed.status(), 200);
    assert_eq!(allowed.text().await.expect("a body"), "upstream");
    assert_eq!(seen.lock().expect("not poisoned").len(), LIMIT + 1);
}

/// Asks the gate of `app` directly.
async fn decide(app: &TestApp, headers: &[(&str, &str)]) -> Response {
    let mut request = app.client.get(format!(
        "{}/decide",
        app.gate_address.as_deref().expect("a gate")
    ));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("the gate answers")
}

fn asked(domain: &str, address: &str) -> Vec<(&'static str, String)> {
    vec![
        ("X-Gate-Secret", SECRET.to_string()),
        ("X-Gate-Domain", domain.to_string()),
        ("X-Gate-Descriptor", format!("remote_address={address}")),
    ]
}

async fn decide_for(app: &TestApp, domain: &str, address: &str) -> Response {
    let headers = asked(domain, address);
    let borrowed: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
    decide(app, &borrowed).await
}

#[sqlx::test]
async fn the_gate_answers_200_then_403_with_headers_and_refuses_a_wrong_secret_or_a_bad_descriptor(
    db: PgPool,
) {
    let app = spawn_app_with(&db, gated).await;
    put_domain(&app, &[&app], per_address(DOMAIN, 1, "open")).await;

    let admitted = decide_for(&app, DOMAIN, "10.1.0.1").await;
    assert_eq!(admitted.status(), 200);
    assert!(header(&admitted, "ratelimit-policy").contains("q=1"));
    let refused = decide_for(&app, DOMAIN, "10.1.0.1").await;
    assert_eq!(refused.status(), 403);
    assert!(
        header(&refused, "retry-after")
            .parse::<u64>()
            .expect("seconds")
            > 0
    );
    assert_eq!(decide_for(&app, DOMAIN, "10.1.0.2").await.status(), 200);

    for secret in [None, Some("wrong"), Some("")] {
        let mut headers = vec![
            ("X-Gate-Domain", DOMAIN),
            ("X-Gate-Descriptor", "remote_address=10.1.0.3"),
        ];
        headers.extend(secret.map(|s| ("X-Gate-Secret", s)));
        let answer = decide(&app, &headers).await;
        assert_eq!(answer.status(), 500, "secret {secret:?}");
        assert_eq!(json(answer).await["code"], "GATE_SECRET_INVALID");
    }
    let long = format!("remote_address={}", "x".repeat(300));
    let answer = decide(
        &app,
        &[
            ("X-Gate-Secret", SECRET),
            ("X-Gate-Domain", DOMAIN),
            ("X-Gate-Descriptor", &long),
        ],
    )
    .await;
    assert_eq!(answer.status(), 400);
    let body = json(answer).await;
    assert_eq!(body["code"], "VALIDATION_FAILED");
    assert_eq!(body["field"], "X-Gate-Descriptor");
    let answer = decide(
        &app,
        &[("X-Gate-Secret", SECRET), ("X-Gate-Descriptor", "a=1")],
    )
    .await;
    assert_eq!(json(answer).await["field"], "X-Gate-Domain");

    // The service's own port has no such route.
    assert_eq!(app.get("/decide").await.status(), 404);
}

#[sqlx::test]
async fn with_redis_away_the_gate_refuses_closed_admits_open_and_counts_local_in_process(
    db: PgPool,
) {
    let mut redis = OwnRedis::start().await;
    let app = spawn_app_with(&db, |s| {
        gated(s);
        use_own_redis(s, redis.url());
    })
    .await;
    // Stored while Redis is up: a domain's edit needs it (its version key).
    for mode in ["closed", "open", "local"] {
        put_domain(&app, &[&app], per_address(mode, 2, mode)).await;
    }
    redis.stop();
    let closed = decide_for(&app, "closed", "10.2.0.1").await;
    assert_eq!(closed.status(), 403);
    assert_eq!(header(&closed, "retry-after"), "1");
    for _ in 0..3 {
        assert_eq!(decide_for(&app, "open", "10.2.0.1").await.status(), 200);
    }
    let mut answers = Vec::new();
    for _ in 0..3 {
        answers.push(
            decide_for(&app, "local", "10.2.0.9")
                .await
                .status()
                .as_u16(),
        );
    }
    assert_eq!(answers, [200, 200, 403]);
}

#[tokio::test]
async fn a_gate_without_its_secret_fails_the_start_naming_the_setting() {
    let settings = Settings {
        gate_port: Some(0),
        ..seckill_test_support::redis_test_settings()
    };
    let error = Application::build(settings)
        .await
        .err()
        .expect("the start fails");
    assert!(
        format!("{error:#}").contains("SECKILL_GATE_SECRET"),
        "{error:#}"
    );
}
