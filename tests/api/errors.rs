//! Every client mistake gets its JSON envelope and its stable code, never a 500.

use reqwest::header::CONTENT_TYPE;
use sqlx::PgPool;

use crate::helpers::{json, spawn_app, TestApp};

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

async fn post_session_raw(
    app: &TestApp,
    content_type: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    app.client
        .post(app.url("/api/session"))
        .header(CONTENT_TYPE, content_type)
        .body(body)
        .send()
        .await
        .unwrap()
}

#[sqlx::test]
async fn a_syntax_error_in_the_body_is_malformed_json(db: PgPool) {
    let app = spawn_app(&db).await;
    let response = post_session_raw(&app, "application/json", r#"{"userId": 1"#).await;
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
        let response = post_session_raw(&app, "application/json", body).await;
        let error = assert_error(response, 400, "VALIDATION_FAILED").await;
        assert_eq!(error["field"], "userId", "{body}");
    }
}

#[sqlx::test]
async fn a_wrong_content_type_is_unsupported_media_type(db: PgPool) {
    let app = spawn_app(&db).await;
    let response = post_session_raw(&app, "text/plain", r#"{"userId": 1}"#).await;
    assert_error(response, 415, "UNSUPPORTED_MEDIA_TYPE").await;
}

#[sqlx::test]
async fn a_body_over_16_kib_is_payload_too_large(db: PgPool) {
    let app = spawn_app(&db).await;
    let padding = "x".repeat(17 * 1024);
    let body = format!(r#"{{"userId": 1, "padding": "{padding}"}}"#);
    let response = post_session_raw(&app, "application/json", body).await;
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
