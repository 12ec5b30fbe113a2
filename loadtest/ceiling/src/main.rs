//! `ceiling`: how fast this machine can answer seckill's hot requests at all.
//!
//! `make bench` runs it beside the app so that every app figure has a ceiling next to
//! it. Each route does the work the app cannot avoid for that answer, and nothing else:
//!
//! - `POST /seckill`: verify the HS256 bearer token as the app does (`sub` = user id),
//!   parse `{"itemId": N}`, take the client IP (from a loopback peer, the right-most
//!   `X-Forwarded-For` entry), then ONE EVALSHA of `lua/sliding_window.lua` with the
//!   `seckill` policy's three keys and arguments. 200 or 429 with a constant body,
//!   from the first element of the script's reply (1 = admitted).
//! - `GET /api/limited`: the same call with the `limited` policy's three keys (the
//!   client's, falling back to the IP as no `X-Client-Id` is sent, the address's and its
//!   network's).
//! - `POST /constant`: token and body only: the bar for the app's sold-out answer.
//! - `GET /health/live`: a constant.
//!
//! Each actix worker opens its own multiplexed Redis connection on first use, on its
//! own runtime, so no request crosses threads. No logging, no metrics, no reconnection
//! (a benchmark tool: restart it).
//!
//! Environment: `REDIS_URL`, `SECKILL_REDIS_KEY_PREFIX`, `SECKILL_PORT`,
//! `SECKILL_WORKERS` (default 2), `SECKILL_JWT_SECRET`, and the rules as
//! `CEILING_{API,USER,IP,LIMITED,LIMITED_IP,LIMITED_NETWORK}_{THRESHOLD,WINDOW_MS}`
//! (default: the app's defaults).

use std::io;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use actix_web::http::header::AUTHORIZATION;
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use redis::aio::MultiplexedConnection;
use serde::Deserialize;
use tokio::sync::OnceCell;

/// The app's `LOCAL_JWT_SECRET` (src/configuration.rs): tokens from its dev login pass.
const LOCAL_JWT_SECRET: &str = "local-development-jwt-secret-change-me-0000";

struct Shared {
    redis: redis::Client,
    script: redis::Script,
    key: DecodingKey,
    validation: Validation,
    /// `<prefix>:{seckill}:sliding_window:` and `<prefix>:{limited}:sliding_window:`.
    seckill_keys: String,
    limited_keys: String,
    /// (window_ms, threshold) of api, user, ip; then of the limited policy's client, ip
    /// and network rules.
    seckill_rules: [(u64, u64); 3],
    limited_rules: [(u64, u64); 3],
    /// Script members are `<run>-<n>`: unique per request, across restarts too.
    run: String,
    next: AtomicU64,
}

/// One per worker: its own connection, opened on first use on the worker's runtime.
#[derive(Default)]
struct Worker(OnceCell<MultiplexedConnection>);

/// The app's claims: `sub`, `exp` and `iat` must all be there.
#[derive(Deserialize)]
#[allow(dead_code)]
struct Claims {
    sub: String,
    exp: i64,
    iat: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Purchase {
    item_id: i64,
}

fn answer(status: StatusCode, body: &'static str) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/json")
        .body(body)
}

/// An answer other than the route's main one: status and constant body.
type Refusal = (StatusCode, &'static str);

/// Token, then body, checked as the app checks them: the user id.
fn shopper(shared: &Shared, req: &HttpRequest, body: &[u8]) -> Result<i64, Refusal> {
    let user = (|| {
        let value = req.headers().get(AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = value.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then_some(())?;
        let data =
            jsonwebtoken::decode::<Claims>(token.trim(), &shared.key, &shared.validation).ok()?;
        data.claims.sub.parse::<i64>().ok().filter(|id| *id > 0)
    })()
    .ok_or((StatusCode::UNAUTHORIZED, r#"{"code":"UNAUTHENTICATED"}"#))?;
    match serde_json::from_slice::<Purchase>(body) {
        Ok(p) if p.item_id > 0 => Ok(user),
        _ => Err((StatusCode::BAD_REQUEST, r#"{"code":"VALIDATION_FAILED"}"#)),
    }
}

/// The peer, or for a loopback peer (the app's default trusted proxy) the right-most
/// `X-Forwarded-For` entry.
fn client_ip(req: &HttpRequest) -> Option<IpAddr> {
    let peer = req.peer_addr()?.ip();
    if !peer.is_loopback() {
        return Some(peer);
    }
    let forwarded = req.headers().get_all("x-forwarded-for").last();
    let hop = forwarded.and_then(|v| v.to_str().ok()?.rsplit(',').next()?.trim().parse().ok());
    Some(hop.unwrap_or(peer))
}

/// One script call, exactly as the app makes it: KEYS, then "" (Redis clock), a unique
/// member, and window/threshold per rule.
async fn decide(
    shared: &Shared,
    worker: &Worker,
    keys: &[String],
    rules: &[(u64, u64)],
) -> HttpResponse {
    let n = shared.next.fetch_add(1, Ordering::Relaxed);
    let mut call = shared.script.prepare_invoke();
    for key in keys {
        call.key(key);
    }
    // Now from the Redis clock, the request id, every rule enforced (the contract in
    // src/limiter/backend.rs).
    call.arg("")
        .arg(format!("{}-{n}", shared.run))
        .arg(rules.len());
    for (window_ms, threshold) in rules {
        call.arg(window_ms).arg(threshold);
    }
    let conn = worker
        .0
        .get_or_try_init(|| shared.redis.get_multiplexed_async_connection())
        .await;
    let reply = match conn {
        Ok(conn) => call.invoke_async::<Vec<i64>>(&mut conn.clone()).await,
        Err(e) => Err(e),
    };
    match reply.as_deref() {
        Ok([1, ..]) => answer(StatusCode::OK, r#"{"ok":true}"#),
        Ok([_, ..]) => answer(StatusCode::TOO_MANY_REQUESTS, r#"{"code":"RATE_LIMITED"}"#),
        _ => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            r#"{"code":"LIMITER_UNAVAILABLE"}"#,
        ),
    }
}

async fn seckill(
    req: HttpRequest,
    body: web::Bytes,
    shared: web::Data<Shared>,
    worker: web::Data<Worker>,
) -> HttpResponse {
    let user = match shopper(&shared, &req, &body) {
        Ok(user) => user,
        Err((status, body)) => return answer(status, body),
    };
    let Some(ip) = client_ip(&req) else {
        return answer(StatusCode::BAD_REQUEST, r#"{"code":"NO_CLIENT_IP"}"#);
    };
    let p = &shared.seckill_keys;
    let keys = [
        format!("{p}api:lit:purchase"),
        format!("{p}user:{user}"),
        format!("{p}ip:{ip}"),
    ];
    decide(&shared, &worker, &keys, &shared.seckill_rules).await
}

async fn limited(
    req: HttpRequest,
    shared: web::Data<Shared>,
    worker: web::Data<Worker>,
) -> HttpResponse {
    let Some(ip) = client_ip(&req) else {
        return answer(StatusCode::BAD_REQUEST, r#"{"code":"NO_CLIENT_IP"}"#);
    };
    let p = &shared.limited_keys;
    // The app's `ClientIp` (an IPv6 address keyed by its /64) and its network.
    let (ip, network) = match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            (v4.to_string(), format!("{a}.{b}.{c}.0/24"))
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let net = |n: usize| {
                let mut kept = [0u16; 8];
                kept[..n].copy_from_slice(&s[..n]);
                std::net::Ipv6Addr::from(kept)
            };
            (format!("{}/64", net(4)), format!("{}/48", net(3)))
        }
    };
    let keys = [
        format!("{p}client:ip:{ip}"),
        format!("{p}ip:{ip}"),
        format!("{p}network:net:{network}"),
    ];
    decide(&shared, &worker, &keys, &shared.limited_rules).await
}

async fn constant(req: HttpRequest, body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    match shopper(&shared, &req, &body) {
        Ok(_) => answer(StatusCode::OK, r#"{"ok":true}"#),
        Err((status, body)) => answer(status, body),
    }
}

/// `name` parsed, or `default` when unset; an unparsable value is an error, not a default.
fn env<T: FromStr>(name: &str, default: T) -> io::Result<T> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|_| io::Error::other(format!("{name}={v:?} is not valid"))),
        Err(_) => Ok(default),
    }
}

fn rule(name: &str, window_ms: u64, threshold: u64) -> io::Result<(u64, u64)> {
    Ok((
        env(&format!("CEILING_{name}_WINDOW_MS"), window_ms)?,
        env(&format!("CEILING_{name}_THRESHOLD"), threshold)?,
    ))
}

#[actix_web::main]
async fn main() -> io::Result<()> {
    let prefix: String = env("SECKILL_REDIS_KEY_PREFIX", "seckill".into())?;
    let secret: String = env("SECKILL_JWT_SECRET", LOCAL_JWT_SECRET.into())?;
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 5;
    validation.set_required_spec_claims(&["exp", "sub"]);
    let redis_url: String = env("REDIS_URL", "redis://127.0.0.1:6380".into())?;
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let shared = web::Data::new(Shared {
        redis: redis::Client::open(redis_url).map_err(io::Error::other)?,
        script: redis::Script::new(include_str!("../../../lua/sliding_window.lua")),
        key: DecodingKey::from_secret(secret.as_bytes()).map_err(io::Error::other)?,
        validation,
        seckill_keys: format!("{prefix}:{{seckill}}:sliding_window:"),
        limited_keys: format!("{prefix}:{{limited}}:sliding_window:"),
        seckill_rules: [
            rule("API", 1_000, 1_000)?,
            rule("USER", 60_000, 3)?,
            rule("IP", 60_000, 5)?,
        ],
        limited_rules: [
            rule("LIMITED", 60_000, 100)?,
            rule("LIMITED_IP", 60_000, 1_000)?,
            rule("LIMITED_NETWORK", 60_000, 10_000)?,
        ],
        run: format!("c{:x}", started.as_nanos()),
        next: AtomicU64::new(0),
    });
    let port: u16 = env("SECKILL_PORT", 8090)?;
    HttpServer::new(move || {
        App::new()
            .app_data(shared.clone())
            .app_data(web::Data::new(Worker::default()))
            .route("/seckill", web::post().to(seckill))
            .route("/api/limited", web::get().to(limited))
            .route("/constant", web::post().to(constant))
            .route(
                "/health/live",
                web::get().to(|| async { answer(StatusCode::OK, r#"{"status":"live"}"#) }),
            )
    })
    .workers(env("SECKILL_WORKERS", 2)?)
    .bind(("127.0.0.1", port))?
    .run()
    .await
}
