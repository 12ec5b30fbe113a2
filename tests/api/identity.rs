//! Shopper identity: the dev login and bearer-token verification.

use chrono::{Duration, Utc};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use secrecy::ExposeSecret;
use sqlx::PgPool;

use seckill_test_support::{json, spawn_app, spawn_app_with};

#[sqlx::test]
async fn dev_login_issues_a_token_for_the_user(db: PgPool) {
    let app = spawn_app(&db).await;
    let response = app.post_session(42).await;
    assert_eq!(response.status(), 200);
    let body = json(response).await;
    assert_eq!(body["userId"], 42);
    assert!(body["token"]
        .as_str()
        .is_some_and(|t| t.split('.').count() == 3));
    let expires_at =
        chrono::DateTime::parse_from_rfc3339(body["expiresAt"].as_str().unwrap()).unwrap();
    assert!(expires_at > Utc::now());
}

#[sqlx::test]
async fn dev_login_does_not_exist_when_switched_off(db: PgPool) {
    let app = spawn_app_with(&db, |s| s.dev_login = Some(false)).await;
    let response = app.post_session(42).await;
    assert_eq!(response.status(), 404);
    assert_eq!(json(response).await["code"], "NOT_FOUND");
}

fn sign(claims: serde_json::Value, secret: &str, alg: Algorithm) -> String {
    jsonwebtoken::encode(
        &Header::new(alg),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

fn claims(sub: &str, exp_offset: Duration) -> serde_json::Value {
    serde_json::json!({ "sub": sub, "exp": (Utc::now() + exp_offset).timestamp(), "iat": Utc::now().timestamp() })
}

#[sqlx::test]
async fn a_token_from_the_dev_login_is_accepted(db: PgPool) {
    let app = spawn_app(&db).await;
    let token = app.token_for(9).await;
    let response = app.get_me(Some(format!("Bearer {token}"))).await;
    assert_eq!(response.status(), 200);
    assert_eq!(json(response).await, serde_json::json!({ "userId": 9 }));
}

#[sqlx::test]
async fn missing_expired_forged_unsigned_and_garbage_tokens_are_unauthenticated(db: PgPool) {
    let app = spawn_app(&db).await;
    let secret = app.settings.jwt_secret.expose_secret().to_string();
    let expired = sign(
        claims("9", Duration::minutes(-2)),
        &secret,
        Algorithm::HS256,
    );
    let wrongly_signed = sign(
        claims("9", Duration::minutes(5)),
        "another-secret",
        Algorithm::HS256,
    );
    let other_algorithm = sign(claims("9", Duration::minutes(5)), &secret, Algorithm::HS512);
    // alg "none": header and claims, empty signature.
    let b64 = |v: serde_json::Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let unsigned = format!(
        "{}.{}.",
        b64(serde_json::json!({ "alg": "none", "typ": "JWT" })),
        b64(claims("9", Duration::minutes(5)))
    );
    let without_exp = sign(serde_json::json!({ "sub": "9" }), &secret, Algorithm::HS256);
    let bad_sub = sign(claims("0", Duration::minutes(5)), &secret, Algorithm::HS256);

    let cases = [
        ("missing", None),
        ("expired two minutes ago", Some(format!("Bearer {expired}"))),
        ("wrongly signed", Some(format!("Bearer {wrongly_signed}"))),
        (
            "HS512 instead of HS256",
            Some(format!("Bearer {other_algorithm}")),
        ),
        ("alg none", Some(format!("Bearer {unsigned}"))),
        ("no exp", Some(format!("Bearer {without_exp}"))),
        ("sub not a user id", Some(format!("Bearer {bad_sub}"))),
        ("garbage", Some("Bearer not.a.token".into())),
        ("wrong scheme", Some(format!("Basic {expired}"))),
    ];
    for (case, header) in cases {
        let response = app.get_me(header).await;
        assert_eq!(response.status(), 401, "{case}");
        assert_eq!(json(response).await["code"], "UNAUTHENTICATED", "{case}");
    }
}

/// `iat` is optional; `nbf` is enforced; no token may be valid for longer than
/// `token_max_lifetime_secs`; `iss` and `aud` are required once configured.
#[sqlx::test]
async fn tokens_are_held_to_nbf_a_lifetime_cap_and_the_configured_issuer_and_audience(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        s.token_max_lifetime_secs = 3_600;
        s.token_issuer = "https://login.example".into();
        s.token_audience = "seckill".into();
    })
    .await;
    let secret = app.settings.jwt_secret.expose_secret().to_string();
    let now = Utc::now().timestamp();
    let token = |extra: serde_json::Value| {
        let mut claims = serde_json::json!({
            "sub": "9", "exp": now + 600, "iss": "https://login.example", "aud": "seckill"
        });
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                claims.as_object_mut().unwrap().remove(k);
            } else {
                claims[k] = v.clone();
            }
        }
        Some(format!(
            "Bearer {}",
            sign(claims, &secret, Algorithm::HS256)
        ))
    };
    let status = |header| async { app.get_me(header).await.status().as_u16() };

    assert_eq!(status(token(serde_json::json!({}))).await, 200, "no iat");
    assert_eq!(
        status(Some(format!("Bearer {}", app.token_for(9).await))).await,
        200
    );
    let cases = [
        (
            "nbf 3000 s away",
            serde_json::json!({ "nbf": now + 3_000, "exp": now + 3_500 }),
        ),
        (
            "valid for two hours",
            serde_json::json!({ "exp": now + 7_200 }),
        ),
        ("exp 2^62", serde_json::json!({ "exp": 1_i64 << 62 })),
        (
            "issued two hours before its exp",
            serde_json::json!({ "iat": now - 7_000 }),
        ),
        (
            "issued in the future",
            serde_json::json!({ "iat": now + 600 }),
        ),
        (
            "another issuer",
            serde_json::json!({ "iss": "https://evil.example" }),
        ),
        ("no issuer", serde_json::json!({ "iss": null })),
        ("another audience", serde_json::json!({ "aud": "shop-b" })),
        ("no audience", serde_json::json!({ "aud": null })),
    ];
    for (case, extra) in cases {
        assert_eq!(status(token(extra)).await, 401, "{case}");
    }
}
