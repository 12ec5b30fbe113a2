//! The invariants of the request parsers, on any input. The property tests beside this
//! file (`cargo test`) and the fuzz targets (`fuzz/`, `make fuzz`, which include it) both
//! drive these checks, so one rule holds the parsers in both:
//!
//! - no input makes a parser panic;
//! - every refusal is a 4xx of README's error table, and one that parser may give;
//! - every accepted value that becomes part of a Redis key is inside its alphabet and
//!   length limit, and cannot move the key to another hash tag.
//!
//! Each `check_*` takes what a client controls, as raw bytes, runs the parser the way a
//! request reaches it (actix's extractors on a test request where there is one), and
//! panics when an invariant breaks.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;
use std::time::Duration;

use actix_web::http::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use actix_web::test::TestRequest;
use actix_web::{web, FromRequest};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{Algorithm as JwtAlgorithm, EncodingKey};
use secrecy::SecretString;
use serde::de::DeserializeOwned;
use validator::Validate;

use seckill::domain::{ClientId, ClientIp, UserId};
use seckill::http::auth::Shopper;
use seckill::http::forwarded::{client_id, client_ip, TrustedProxies, CLIENT_ID_HEADER};
use seckill::http::idempotency::idempotency_key;
use seckill::http::routes::admin::CreateItemRequest;
use seckill::http::routes::seckill::PurchaseRequest;
use seckill::http::routes::session::SessionRequest;
use seckill::http::{ApiError, JsonBody};
use seckill::identity::{TokenKeys, TokenRules};
use seckill::limiter::keys::redis_key;
use seckill::limiter::keys::ClientKey;
use seckill::limiter::policy::{KeySource, PolicyConfig, RuleConfig};
use seckill::limiter::{Algorithm, Caller, FailMode, Partition, Policy, Rejection, Scope};
use seckill::rules::edit::PolicyEdit;

/// `(status, code)` of every row of README's error table: the answers a client is
/// promised. Read from the README itself, so a code missing there fails here.
fn documented_answers() -> &'static BTreeSet<(u16, String)> {
    static TABLE: OnceLock<BTreeSet<(u16, String)>> = OnceLock::new();
    TABLE.get_or_init(|| {
        include_str!("../../../README.md")
            .lines()
            .filter_map(|line| {
                let mut cells = line.strip_prefix('|')?.split('|').map(str::trim);
                let status: u16 = cells.next()?.parse().ok()?;
                let codes = cells.next()?.split('`').skip(1).step_by(2);
                Some(codes.map(move |code| (status, code.to_string())))
            })
            .flatten()
            .collect()
    })
}

/// Panics unless `error` is answered with a 4xx of README's table whose code is one of
/// `allowed` (what this parser may say).
pub fn assert_refusal(error: &ApiError, allowed: &[&str]) {
    let (status, _, body) = error.parts();
    let body: serde_json::Value = serde_json::from_str(&body).expect("an error body is JSON");
    let code = body["code"].as_str().expect("an error body has a code");
    assert!(status.is_client_error(), "not a 4xx: {status} {body}");
    assert!(
        documented_answers().contains(&(status.as_u16(), code.to_string())),
        "not in README's error table: {status} {body}"
    );
    assert!(
        allowed.contains(&code),
        "not an answer of this parser: {body}"
    );
}

/// `A-Z a-z 0-9 . _ : -`: `X-Client-Id`, partitions and literal rule keys.
fn client_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"._:-".contains(&b)
}

/// `A-Z a-z 0-9 _ -`: `Idempotency-Key`.
fn idempotency_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"_-".contains(&b)
}

/// An address in its key form: `1.2.3.4` or `2001:db8::/64`.
fn client_ip_byte(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || b".:/".contains(&b)
}

/// The longest key form of an address: eight full IPv6 groups and `/64`.
const CLIENT_IP_MAX_LEN: usize = 39 + 3;

fn assert_key_part(what: &str, part: &str, allowed: fn(u8) -> bool, max_len: usize) {
    assert!(
        (1..=max_len).contains(&part.len()) && part.bytes().all(allowed),
        "{what} {part:?} is outside its alphabet or longer than {max_len}"
    );
}

/// Runs an extractor's future: the JSON one needs Tokio's timer for its body deadline.
fn block_on<F: Future>(future: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a Tokio runtime");
    }
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// `JsonBody` over one of the bodies the routes take (`which` picks it): a refusal is a
/// 415, 413 or 400, and whatever it accepts passes its own validation.
pub fn check_json_body(which: u8, content_type: &[u8], body: &[u8]) {
    match which % 4 {
        0 => json_body::<PurchaseRequest>(content_type, body),
        1 => json_body::<SessionRequest>(content_type, body),
        2 => json_body::<CreateItemRequest>(content_type, body),
        _ => json_body::<PolicyEdit>(content_type, body),
    }
}

fn json_body<T: DeserializeOwned + Validate + 'static>(content_type: &[u8], body: &[u8]) {
    let mut request = TestRequest::post().set_payload(body.to_vec());
    if let Ok(value) = HeaderValue::from_bytes(content_type) {
        request = request.insert_header((CONTENT_TYPE, value));
    }
    let (req, mut payload) = request.to_http_parts();
    match block_on(JsonBody::<T>::from_request(&req, &mut payload)) {
        Ok(JsonBody(value)) => assert!(value.validate().is_ok(), "accepted an invalid body"),
        Err(error) => assert_refusal(
            &error,
            &[
                "UNSUPPORTED_MEDIA_TYPE",
                "PAYLOAD_TOO_LARGE",
                "MALFORMED_JSON",
                "VALIDATION_FAILED",
            ],
        ),
    }
}

/// The secret of the checks' token keys.
pub const TOKEN_SECRET: &str = "parser-checks-secret";

fn token_keys() -> web::Data<TokenKeys> {
    static KEYS: OnceLock<web::Data<TokenKeys>> = OnceLock::new();
    KEYS.get_or_init(|| {
        web::Data::new(
            TokenKeys::new(
                &SecretString::from(TOKEN_SECRET),
                TokenRules {
                    ttl: Duration::from_secs(60),
                    max_lifetime: Duration::from_secs(3_600),
                    issuer: None,
                    audience: None,
                },
            )
            .expect("a signing key"),
        )
    })
    .clone()
}

/// The `Shopper` extractor over an `Authorization` header of these bytes: every refusal
/// is a 401, every shopper a positive user id in its canonical decimal form.
pub fn check_authorization(value: &[u8]) -> Option<UserId> {
    let value = HeaderValue::from_bytes(value).ok()?;
    let req = TestRequest::default()
        .insert_header((AUTHORIZATION, value))
        .app_data(token_keys())
        .to_http_request();
    match Shopper::extract(&req).into_inner() {
        Ok(Shopper(user)) => {
            check_user_id(user.to_string().as_bytes());
            Some(user)
        }
        Err(error) => {
            assert_refusal(&error, &["UNAUTHENTICATED"]);
            None
        }
    }
}

/// A bearer token whose claims are `payload` as it is, HS256-signed with the checks'
/// secret: past the signature into the claims. A shopper comes only from a `sub` that
/// is exactly that user's id.
pub fn check_signed_claims(payload: &[u8]) {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let message = format!("{header}.{}", URL_SAFE_NO_PAD.encode(payload));
    let key = EncodingKey::from_secret(TOKEN_SECRET.as_bytes()).expect("a signing key");
    let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, JwtAlgorithm::HS256)
        .expect("HMAC signs any message");
    let Some(user) = check_authorization(format!("Bearer {message}.{signature}").as_bytes()) else {
        return;
    };
    let claims: serde_json::Value =
        serde_json::from_slice(payload).expect("accepted claims are JSON");
    assert_eq!(claims["sub"].as_str(), Some(user.to_string().as_str()));
}

/// A user id in a token's `sub`: what parses is a positive decimal printed back as it
/// was written, so one user has one key.
pub fn check_user_id(text: &[u8]) {
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    if let Ok(user) = text.parse::<UserId>() {
        assert!(user.get() > 0);
        assert_eq!(user.to_string(), text, "not the canonical form");
    }
}

/// The proxies the checks trust: loopback, as by default.
pub const PROXIES: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::LOCALHOST),
    IpAddr::V6(Ipv6Addr::LOCALHOST),
];

fn trusted_proxies() -> web::Data<TrustedProxies> {
    web::Data::new(TrustedProxies::new(PROXIES.to_vec()))
}

fn is_proxy(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    PROXIES.contains(&ip)
}

/// The client address of a request from `peer` with these `X-Forwarded-For` lines: in
/// its key alphabet, and either the peer's or one a line names.
pub fn check_forwarded_for(peer: IpAddr, lines: &[&[u8]]) -> ClientIp {
    let mut request = TestRequest::default()
        .peer_addr(SocketAddr::new(peer, 40_000))
        .app_data(trusted_proxies());
    for line in lines {
        if let Ok(value) = HeaderValue::from_bytes(line) {
            request = request.append_header(("x-forwarded-for", value));
        }
    }
    let ip = client_ip(&request.to_http_request()).expect("a peer and its proxies are known");
    assert_key_part(
        "client IP",
        &ip.to_string(),
        client_ip_byte,
        CLIENT_IP_MAX_LEN,
    );
    let mut named = lines
        .iter()
        .flat_map(|line| line.split(|&b| b == b','))
        .filter_map(|hop| std::str::from_utf8(hop).ok()?.trim().parse().ok());
    assert!(
        ip == ClientIp::new(peer) || named.any(|hop| ClientIp::new(hop) == ip),
        "{ip} is neither the peer nor a forwarded address"
    );
    ip
}

/// What a trusted proxy appends to a client's `X-Forwarded-For` (`<the client's>, <the
/// address it saw>`) is the address the client is keyed by, whatever the client wrote.
pub fn check_forwarded_by_proxy(client_written: &[u8], seen: IpAddr) {
    if HeaderValue::from_bytes(client_written).is_err() || is_proxy(seen) {
        return;
    }
    let mut line = client_written.to_vec();
    line.extend_from_slice(format!(", {seen}").as_bytes());
    let ip = check_forwarded_for(IpAddr::V4(Ipv4Addr::LOCALHOST), &[&line]);
    assert_eq!(ip, ClientIp::new(seen), "the client chose its address");
}

/// `X-Client-Id` from a trusted proxy or from anyone else: believed only from the proxy,
/// a 400 when invalid there, and a believed id is inside its alphabet and length.
pub fn check_client_id(value: &[u8], from_proxy: bool) {
    let Ok(value) = HeaderValue::from_bytes(value) else {
        return;
    };
    let peer = if from_proxy {
        PROXIES[0]
    } else {
        IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9))
    };
    let req = TestRequest::default()
        .peer_addr(SocketAddr::new(peer, 40_000))
        .app_data(trusted_proxies())
        .insert_header((CLIENT_ID_HEADER, value))
        .to_http_request();
    match client_id(&req) {
        Ok(Some(id)) => {
            assert!(from_proxy, "believed a client's own X-Client-Id");
            assert_key_part("X-Client-Id", id.as_str(), client_id_byte, 64);
        }
        Ok(None) => assert!(!from_proxy, "ignored a trusted proxy's X-Client-Id"),
        Err(error) => {
            assert!(from_proxy, "refused a header it should ignore");
            assert_refusal(&error, &["VALIDATION_FAILED"]);
        }
    }
}

/// `Idempotency-Key`: a 400 or a key inside its alphabet and length.
pub fn check_idempotency_key(value: &[u8]) {
    let Ok(value) = HeaderValue::from_bytes(value) else {
        return;
    };
    match idempotency_key(&value) {
        Ok(key) => assert_key_part("Idempotency-Key", key.as_str(), idempotency_key_byte, 64),
        Err(error) => assert_refusal(&error, &["VALIDATION_FAILED"]),
    }
}

/// What a limiter key is built from, raw: names and a literal as an operator's edit
/// hands them over, the rest as a request carries it.
#[derive(Debug, Clone)]
pub struct KeyInput<'a> {
    pub policy: &'a str,
    pub rule: &'a str,
    pub literal: &'a str,
    /// Picks the rule's key source.
    pub source: u8,
    pub per_item: bool,
    pub partition: &'a str,
    pub user: i64,
    pub peer: IpAddr,
    pub client_id: &'a [u8],
}

const KEY_PREFIX: &str = "seckill";
const ROUTE: &str = "/seckill";

/// The longest limiter key: prefix, the longest tag (a 64-character partition), `limit`,
/// the policy name, the longest algorithm, the rule name, `id:` and a client id.
const LIMITER_KEY_MAX_LEN: usize =
    KEY_PREFIX.len() + ":{".len() + 64 + "}:limit:".len() + 32 + 1 + 14 + 1 + 32 + 1 + 3 + 64;

/// `limiter::keys::redis_key` for a policy and caller made of `input`: names the policy
/// refuses never reach a key, and every key keeps its one hash tag (the policy's or the
/// partition's) with the rest inside the key alphabet and length.
pub fn check_limiter_key(input: &KeyInput) {
    let key = match input.source % 5 {
        0 => KeySource::Literal(input.literal.into()),
        1 => KeySource::User,
        2 => KeySource::Ip,
        3 => KeySource::ClientId,
        _ => KeySource::Route,
    };
    let config = PolicyConfig {
        algorithm: Algorithm::SlidingWindow,
        fail_mode: FailMode::Open,
        enabled: true,
        scope: if input.per_item {
            Scope::PerItem
        } else {
            Scope::Global
        },
        rules: vec![RuleConfig::new(input.rule, key, 1_000, 1, "slow down")],
    };
    let Ok(policy) = Policy::parse(input.policy, &config) else {
        return;
    };
    let client_id = std::str::from_utf8(input.client_id)
        .ok()
        .and_then(|raw| ClientId::parse(raw).ok());
    let caller = Caller {
        user: UserId::try_from(input.user).ok(),
        ip: ClientIp::new(input.peer),
        client_id: Some(client_id.as_ref().map_or(ClientKey::Address, ClientKey::Id)),
        route: ROUTE.into(),
        partition: Partition::new(input.partition.into()),
    };
    for algorithm in Algorithm::ALL {
        match redis_key(KEY_PREFIX, &policy, algorithm, &policy.rules[0], &caller) {
            Ok(key) => assert_limiter_key(&key, &policy, &caller),
            Err(Rejection::NeedsUser) => assert!(caller.user.is_none()),
            Err(Rejection::Misconfigured(_)) => {
                assert!(input.per_item && caller.partition.is_none())
            }
            Err(other) => panic!("building a key cannot be {other:?}"),
        }
    }
}

fn assert_limiter_key(key: &str, policy: &Policy, caller: &Caller<'_>) {
    let tag = match policy.scope {
        Scope::Global => policy.name.as_str(),
        Scope::PerItem => caller.partition.as_ref().map_or("", Partition::as_str),
    };
    let Some(rest) = key.strip_prefix(&format!("{KEY_PREFIX}:{{{tag}}}:")) else {
        panic!("{key:?} is not under the hash tag {{{tag}}}");
    };
    assert_key_part("limiter key", tag, client_id_byte, 64);
    // `/`: an IPv6 network and the route pattern.
    let key_byte = |b: u8| client_id_byte(b) || b == b'/';
    assert_key_part("limiter key", rest, key_byte, LIMITER_KEY_MAX_LEN);
    assert!(key.len() <= LIMITER_KEY_MAX_LEN, "{key:?} is too long");
}
