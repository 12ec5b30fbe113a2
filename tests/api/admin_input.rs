//! Admin input that Postgres cannot store or compare (a NUL byte, a year before 1970 or
//! after 9999) is refused at the edge with 400 `VALIDATION_FAILED` naming the field,
//! never passed down to answer 500 from inside a query.

use reqwest::Method;
use serde_json::json;
use sqlx::PgPool;

use seckill_test_support::{json as body_of, spawn_app, ADMIN_TOKEN};

async fn assert_refused(response: reqwest::Response, field: &str, what: &str) {
    assert_eq!(response.status(), 400, "{what}");
    let body = body_of(response).await;
    assert_eq!(body["code"], "VALIDATION_FAILED", "{what}: {body}");
    assert_eq!(body["field"], field, "{what}: {body}");
}

fn item(name: &str, starts_at: &str, ends_at: &str) -> serde_json::Value {
    json!({ "name": name, "priceCents": 100, "stock": 5, "startsAt": starts_at, "endsAt": ends_at })
}

#[sqlx::test]
async fn admin_input_postgres_cannot_store_is_a_400_naming_the_field(db: PgPool) {
    let app = spawn_app(&db).await;
    let (start, end) = ("2026-01-01T00:00:00Z", "2030-01-01T00:00:00Z");

    let items = "/admin/api/items";
    let nul_name = app
        .admin_send(Method::POST, items, Some(item("a\u{0}b", start, end)))
        .await;
    assert_refused(nul_name, "name", "a NUL in an item's name").await;
    let ancient = item("x", "-5000-01-01T00:00:00Z", end);
    let ancient = app.admin_send(Method::POST, items, Some(ancient)).await;
    assert_refused(ancient, "startsAt", "a start 5000 BC").await;
    let far = item("x", start, "+10000-01-01T00:00:00Z");
    let far = app.admin_send(Method::POST, items, Some(far)).await;
    assert_refused(far, "endsAt", "an end in the year 10000").await;

    let message = json!({ "rules": [{ "name": "api", "message": "busy\u{0}" }] });
    let nul_message = app
        .admin_send(Method::PUT, "/admin/api/policies/seckill", Some(message))
        .await;
    assert_refused(nul_message, "message", "a NUL in a rule's message").await;

    let get = app.admin_get("/admin/api/policies/%00").await;
    assert_refused(get, "name", "GET of a policy named NUL").await;
    let edit = json!({ "rules": [] });
    let put = app
        .admin_send(Method::PUT, "/admin/api/policies/%00", Some(edit))
        .await;
    assert_refused(put, "name", "PUT of a policy named NUL").await;
    let audit = app.admin_get("/admin/api/audit?policy=%00").await;
    assert_refused(audit, "policy", "the audit of a policy named NUL").await;

    for (field, value) in [
        ("from", "-5000-01-01T00:00:00Z"),
        ("to", "-4714-01-01T00:00:00Z"),
    ] {
        let response = app
            .client
            .get(app.url("/admin/api/orders"))
            .query(&[(field, value)])
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("request sent");
        assert_refused(response, field, &format!("orders {field}={value}")).await;
    }

    // What is still fine: an unknown but well-formed policy is a 404, and the bounds
    // themselves are accepted.
    let unknown = app.admin_get("/admin/api/policies/nosuch").await;
    assert_eq!(unknown.status(), 404);
    let bounds = item("x", "1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z");
    assert_eq!(
        app.admin_send(Method::POST, items, Some(bounds))
            .await
            .status(),
        201
    );
}
