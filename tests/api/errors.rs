//! Every client mistake gets its JSON envelope and its stable code, never a 500.

use reqwest::header::CONTENT_TYPE;
use sqlx::PgPool;

use seckill_test_support::{json, spawn_app};

async fn assert_error(response: reqwest::Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(response.status(), status);
    let content_type = response.headers()[CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let body = json(response).await;
    assert_eq!(body["code"], code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    body
}

#[sqlx::test]
async fn a_syntax_error_in_the_body_is_malformed_json(db: PgPool) {
    let app = spawn_app(&db).await;
    let response = app
        .post_session_raw("application/json", r#"{"userId": 1"#)
        .await;
    assert_error(response, 400, "MALFORMED_JSON").await;
}

#[sqlx::test]
async fn well_formed_but_invalid_bodies_name_the_field(db: PgPool) {
    let app = spawn_app(&db).await;
    for body in [
        r#"{"userId": 0}"#,
        r#"{"userId": -5}"#,
        r#"{"userId": "7"}"#,
        r#"{"userId": 1.5}"#,
        "{}",
    ] {
        let response = app.post_session_raw("application/json", body).await;
        let error = assert_error(response, 400, "VALIDATION_FAILED").await;
        assert_eq!(error["field"], "userId", "{body}");
    }
}

#[sqlx::test]
async fn a_wrong_content_type_is_unsupported_media_type(db: PgPool) {
    let app = spawn_app(&db).await;
    let response = app.post_session_raw("text/plain", r#"{"userId": 1}"#).await;
    assert_error(response, 415, "UNSUPPORTED_MEDIA_TYPE").await;
}

#[sqlx::test]
async fn a_body_over_16_kib_is_payload_too_large(db: PgPool) {
    let app = spawn_app(&db).await;
    let padding = "x".repeat(17 * 1024);
    let body = format!(r#"{{"userId": 1, "padding": "{padding}"}}"#);
    let response = app.post_session_raw("application/json", body).await;
    assert_error(response, 413, "PAYLOAD_TOO_LARGE").await;
}

#[sqlx::test]
async fn an_unknown_path_is_a_json_not_found(db: PgPool) {
    let app = spawn_app(&db).await;
    assert_error(app.get("/no/such/thing").await, 404, "NOT_FOUND").await;
}

#[sqlx::test]
async fn a_wrong_method_is_a_json_method_not_allowed(db: PgPool) {
    let app = spawn_app(&db).await;
    assert_error(app.get("/api/session").await, 405, "METHOD_NOT_ALLOWED").await;
    let response = app
        .client
        .post(app.url("/health/live"))
        .send()
        .await
        .unwrap();
    assert_error(response, 405, "METHOD_NOT_ALLOWED").await;
}

/// A body that drips in (16 000 bytes announced, one sent per 200 ms) gets 408 in our
/// envelope once the body deadline passes, instead of holding a worker for hours.
#[sqlx::test]
async fn a_slow_drip_body_gets_request_timeout(db: PgPool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let app = seckill_test_support::spawn_app_with(&db, |s| s.body_timeout_ms = 1_000).await;
    let token = app.token_for(7).await;
    let address = app.address.trim_start_matches("http://").to_string();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /seckill HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 16000\r\n\r\n{{"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    // Drip one byte every 200 ms (time itself is what is tested), reading whatever
    // comes back; give up after 10 s.
    while started.elapsed() < std::time::Duration::from_secs(10) {
        let _ = socket.write_all(b" ").await;
        match tokio::time::timeout(
            std::time::Duration::from_millis(200),
            socket.read(&mut buffer),
        )
        .await
        {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                answer.extend_from_slice(&buffer[..n]);
                if answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
                    break;
                }
            }
            Ok(Err(_)) => break,
            Err(_) => {}
        }
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.starts_with("HTTP/1.1 408"),
        "after {:?}: {text}",
        started.elapsed()
    );
    assert!(text.contains(r#""code":"REQUEST_TIMEOUT""#), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

/// The static pages' own refusals (a hidden file, an encoded `..`, a range outside a
/// file, a failed precondition) come in the envelope too, not as actix-files' text.
#[sqlx::test]
async fn the_static_pages_refuse_in_the_envelope_too(db: PgPool) {
    let app = spawn_app(&db).await;
    let page = app.get("/").await;
    assert_eq!(page.status(), 200);
    assert!(page.headers()[CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/html"));

    for path in [
        "/.gitignore",
        "/..%2fCargo.toml",
        "/admin/..%2f..%2fCargo.toml",
        "/%00",
    ] {
        assert_error(app.get(path).await, 404, "NOT_FOUND").await;
    }
    let outside = app
        .client
        .get(app.url("/app.js"))
        .header("Range", "bytes=99999999-")
        .send()
        .await
        .unwrap();
    assert!(outside.headers().contains_key("content-range"));
    assert_error(outside, 416, "RANGE_NOT_SATISFIABLE").await;
    let stale = app
        .client
        .get(app.url("/app.js"))
        .header("If-Match", "\"not-this-version\"")
        .send()
        .await
        .unwrap();
    assert_error(stale, 412, "PRECONDITION_FAILED").await;
}
