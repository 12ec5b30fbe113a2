//! `GET /api/openapi.json`: the contract a deployment serves. That it lists exactly the
//! router's operations is `http::openapi`'s unit test; schemathesis checks the answers
//! against it in `make test` (`scripts/api-fuzz.sh`).

use serde_json::Value;
use sqlx::PgPool;

use seckill_test_support::{spawn_app, spawn_app_with};

async fn document(app: &seckill_test_support::TestApp) -> Value {
    let response = app
        .client
        .get(app.url("/api/openapi.json"))
        .send()
        .await
        .expect("the document answers");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "application/json"
    );
    response.json().await.expect("the document is JSON")
}

#[sqlx::test]
async fn the_served_document_is_openapi_3_1_with_both_security_schemes(db: PgPool) {
    let app = spawn_app(&db).await;
    let document = document(&app).await;

    assert_eq!(document["openapi"], "3.1.0");
    let schemes = document["components"]["securitySchemes"]
        .as_object()
        .expect("security schemes");
    assert_eq!(schemes["shopper_jwt"]["bearerFormat"], "JWT");
    assert_eq!(schemes["admin_token"]["scheme"], "bearer");
    let purchase = &document["paths"]["/seckill"]["post"];
    assert_eq!(
        purchase["security"][0]["shopper_jwt"],
        serde_json::json!([])
    );
    let refused = &purchase["responses"]["429"];
    assert!(refused["headers"]["Retry-After"].is_object());
    assert_eq!(
        refused["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Error"
    );
    let error = &document["components"]["schemas"]["Error"]["properties"];
    for field in ["code", "message", "dimension", "retryAfterMs", "field"] {
        assert!(
            error[field].is_object(),
            "the error envelope documents {field}"
        );
    }
}

#[sqlx::test]
async fn without_the_dev_login_the_document_does_not_offer_it(db: PgPool) {
    let with = spawn_app_with(&db, |s| s.dev_login = Some(true)).await;
    assert!(document(&with).await["paths"]["/api/session"].is_object());

    let without = spawn_app_with(&db, |s| s.dev_login = Some(false)).await;
    assert!(document(&without).await["paths"]
        .get("/api/session")
        .is_none());
    let login = without
        .client
        .post(without.url("/api/session"))
        .json(&serde_json::json!({ "userId": 1 }))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 404);
}
