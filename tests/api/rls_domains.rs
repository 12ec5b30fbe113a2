//! The edge limiter's domains (issue 40): seeded from their YAML files only where none is
//! stored, edited live through `/admin/api/rls/domains/{domain}` with versions and
//! `If-Match`, audited, refused field by field, and in force on every instance.

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;

use seckill::startup::Application;
use seckill_test_support::{eventually, json, spawn_app, spawn_app_with, test_settings};

const GATEWAY: &str = "domain: gateway
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 5 }
";

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).expect("a file written");
}

fn gateway(requests: u32) -> Value {
    json!({
        "domain": "gateway",
        "algorithm": "sliding_window",
        "descriptors": [{
            "key": "remote_address",
            "rate_limit": { "unit": "second", "requests_per_unit": requests }
        }]
    })
}

fn etag(response: &reqwest::Response) -> String {
    response.headers()["etag"]
        .to_str()
        .expect("an ETag")
        .to_string()
}

/// `(action, version, changed_by)` of the domain's audit rows, oldest first.
async fn audit(db: &PgPool, domain: &str) -> Vec<(String, i64, String)> {
    sqlx::query_as(
        "SELECT action, version, changed_by FROM rls_domain_audit WHERE domain = $1 ORDER BY id",
    )
    .bind(domain)
    .fetch_all(db)
    .await
    .expect("the audit")
}

#[sqlx::test]
async fn files_seed_only_the_domains_not_stored_and_a_bad_file_fails_the_start(db: PgPool) {
    let dir = tempfile::tempdir().expect("a folder");
    write(dir.path(), "gateway.yaml", GATEWAY);
    let folder = dir.path().to_string_lossy().to_string();
    let first = spawn_app_with(&db, |s| s.rls_config_dir = Some(folder.clone())).await;
    let seeded = first.rls_domain(Method::GET, "gateway", None, None).await;
    assert_eq!(seeded.status(), 200);
    assert_eq!(etag(&seeded), r#""1""#);
    assert_eq!(
        json(seeded).await["descriptors"][0]["rate_limit"]["requests_per_unit"],
        5
    );

    // An operator's edit, then a changed file and a new one: the edit stands, the new
    // file's domain is seeded.
    let edited = first
        .rls_domain(Method::PUT, "gateway", Some(gateway(7)), None)
        .await;
    assert_eq!(edited.status(), 200);
    write(dir.path(), "gateway.yaml", &GATEWAY.replace(": 5", ": 9"));
    write(dir.path(), "internal.yml", "domain: internal\n");
    let second = spawn_app_with(&db, |s| s.rls_config_dir = Some(folder.clone())).await;
    let kept = second.rls_domain(Method::GET, "gateway", None, None).await;
    assert_eq!(etag(&kept), r#""2""#);
    assert_eq!(json(kept).await, gateway(7));
    assert_eq!(
        second.domains.current("internal").map(|d| d.version),
        Some(1)
    );
    assert_eq!(
        audit(&db, "gateway").await,
        [
            ("create".into(), 1, "seed".into()),
            ("update".into(), 2, "admin".into())
        ]
    );

    // A typo fails the start, naming the file and the field.
    write(
        dir.path(),
        "typo.yaml",
        "domain: typo\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
    );
    let mut settings = test_settings(&db);
    settings.rls_config_dir = Some(folder);
    let refused = Application::build(settings)
        .await
        .err()
        .expect("the start fails");
    let message = format!("{refused:#}");
    assert!(message.contains("typo.yaml"), "{message}");
    assert!(message.contains("unit"), "{message}");
    let typo: i64 = sqlx::query_scalar("SELECT count(*) FROM rls_domains WHERE domain = 'typo'")
        .fetch_one(&db)
        .await
        .expect("a count");
    assert_eq!(typo, 0);
}

#[sqlx::test]
async fn a_domain_is_created_read_replaced_and_deleted_with_versions_and_if_match(db: PgPool) {
    let app = spawn_app(&db).await;
    let created = app
        .rls_domain(Method::PUT, "gateway", Some(gateway(5)), None)
        .await;
    assert_eq!(created.status(), 201);
    assert_eq!(etag(&created), r#""1""#);
    assert_eq!(json(created).await, gateway(5));

    let read = app.rls_domain(Method::GET, "gateway", None, None).await;
    assert_eq!(etag(&read), r#""1""#);
    assert_eq!(json(read).await, gateway(5));

    let replaced = app
        .rls_domain(Method::PUT, "gateway", Some(gateway(6)), Some(r#""1""#))
        .await;
    assert_eq!(replaced.status(), 200);
    assert_eq!(etag(&replaced), r#""2""#);

    // Made from version 1, which is gone: refused, naming version 2.
    let stale = app
        .rls_domain(Method::PUT, "gateway", Some(gateway(8)), Some(r#""1""#))
        .await;
    assert_eq!(stale.status(), 409);
    let body = json(stale).await;
    assert_eq!(
        (body["code"].as_str(), body["currentVersion"].as_i64()),
        (Some("VERSION_CONFLICT"), Some(2))
    );
    let stale = app
        .rls_domain(Method::DELETE, "gateway", None, Some(r#""1""#))
        .await;
    assert_eq!(stale.status(), 409);

    let listed = json(app.admin_get("/admin/api/rls/domains").await).await;
    assert_eq!(listed["domains"][0]["domain"], "gateway");
    assert_eq!(listed["domains"][0]["version"], 2);
    assert_eq!(listed["domains"][0]["updatedBy"], "admin");

    let deleted = app
        .rls_domain(Method::DELETE, "gateway", None, Some(r#""2""#))
        .await;
    assert_eq!(deleted.status(), 204);
    for (method, if_match) in [
        (Method::GET, None),
        (Method::DELETE, None),
        (Method::PUT, Some(r#""2""#)),
    ] {
        let body = (method == Method::PUT).then(|| gateway(5));
        let gone = app
            .rls_domain(method.clone(), "gateway", body, if_match)
            .await;
        assert_eq!(gone.status(), 404, "{method}");
        assert_eq!(json(gone).await["code"], "NOT_FOUND", "{method}");
    }
    assert_eq!(
        audit(&db, "gateway").await,
        [
            ("create".into(), 1, "admin".into()),
            ("update".into(), 2, "admin".into()),
            ("delete".into(), 2, "admin".into())
        ]
    );
    let (old, new): (Option<Value>, Option<Value>) = sqlx::query_as(
        "SELECT old_document, new_document FROM rls_domain_audit WHERE action = 'update'",
    )
    .fetch_one(&db)
    .await
    .expect("the update's row");
    assert_eq!((old, new), (Some(gateway(5)), Some(gateway(6))));
}

#[sqlx::test]
async fn concurrent_edits_of_one_version_let_one_through_and_concurrent_creations_all_stand(
    db: PgPool,
) {
    let app = spawn_app(&db).await;
    // Four creations of one new domain at once, without If-Match: one creates it, the
    // others replace it in turn; none is lost or refused.
    let creations = futures_util::future::join_all(
        (1..=4).map(|n| app.rls_domain(Method::PUT, "gateway", Some(gateway(n)), None)),
    )
    .await;
    let mut statuses: Vec<u16> = creations.iter().map(|r| r.status().as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 201]);
    let actions: Vec<String> = audit(&db, "gateway")
        .await
        .into_iter()
        .map(|(a, ..)| a)
        .collect();
    assert_eq!(actions, ["create", "update", "update", "update"]);

    // Four edits made from version 4 at once: exactly one stands.
    let edits = futures_util::future::join_all(
        (5..=8).map(|n| app.rls_domain(Method::PUT, "gateway", Some(gateway(n)), Some(r#""4""#))),
    )
    .await;
    let mut statuses: Vec<u16> = edits.iter().map(|r| r.status().as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409, 409, 409]);
    let read = app.rls_domain(Method::GET, "gateway", None, None).await;
    assert_eq!(etag(&read), r#""5""#);
}

#[sqlx::test]
async fn a_refused_document_names_its_field(db: PgPool) {
    let app = spawn_app(&db).await;
    let no_unit = json!({ "domain": "gateway", "descriptors": [
        { "key": "a" },
        { "key": "b", "rate_limit": { "requests_per_unit": 3 } }
    ]});
    let shaper = json!({ "domain": "gateway", "algorithm": "leaky_bucket" });
    let cases = [
        ("gateway", json!({ "domain": "other" }), "domain"),
        ("gateway", no_unit, "descriptors[1].rate_limit.unit"),
        ("gateway", shaper, "algorithm"),
        ("bad%20name", json!({ "domain": "bad name" }), "domain"),
    ];
    for (path, body, field) in cases {
        let refused = app.rls_domain(Method::PUT, path, Some(body), None).await;
        assert_eq!(refused.status(), 400, "{field}");
        let body = json(refused).await;
        assert_eq!(
            (body["code"].as_str(), body["field"].as_str()),
            (Some("VALIDATION_FAILED"), Some(field))
        );
    }
    // A field envoyproxy/ratelimit's format lacks: refused, never ignored.
    let unknown = app
        .rls_domain(
            Method::PUT,
            "gateway",
            Some(json!({ "domain": "gateway", "descriptor": [] })),
            None,
        )
        .await;
    assert_eq!(unknown.status(), 400);
    assert!(app.domains.current("gateway").is_none());
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM rls_domains")
        .fetch_one(&db)
        .await
        .expect("a count");
    assert_eq!(stored, 0);
}

/// The version key is a Redis key of its own: also run on the cluster.
mod topology {
    use super::*;
    use seckill_test_support::spawn_app_from;

    #[sqlx::test]
    async fn a_domain_changed_through_one_instance_is_in_force_on_the_other(db: PgPool) {
        let one = spawn_app(&db).await;
        let two = spawn_app_from(one.settings.clone()).await;
        assert!(two.domains.current("gateway").is_none());

        let version_on_two = |want: Option<i64>| {
            let domains = std::sync::Arc::clone(&two.domains);
            async move {
                let seen = domains.current("gateway").map(|d| d.version);
                (seen == want).then_some(())
            }
        };
        let created = one
            .rls_domain(Method::PUT, "gateway", Some(gateway(5)), None)
            .await;
        assert_eq!(created.status(), 201);
        let ((), lag) = eventually("the creation on two", Duration::from_secs(5), || {
            version_on_two(Some(1))
        })
        .await;
        let limits = two.domains.current("gateway").expect("in force").limits;
        let limit = limits
            .find([("remote_address", "10.0.0.1")])
            .expect("a limit");
        assert_eq!(limit.name, "remote_address");

        let replaced = one
            .rls_domain(Method::PUT, "gateway", Some(gateway(9)), Some(r#""1""#))
            .await;
        assert_eq!(replaced.status(), 200);
        eventually("the edit on two", Duration::from_secs(5), || {
            version_on_two(Some(2))
        })
        .await;
        let document = two.domains.current("gateway").expect("in force").document;
        assert_eq!(
            document.descriptors[0]
                .rate_limit
                .as_ref()
                .and_then(|l| l.requests_per_unit),
            Some(9)
        );

        let deleted = one.rls_domain(Method::DELETE, "gateway", None, None).await;
        assert_eq!(deleted.status(), 204);
        eventually("the deletion on two", Duration::from_secs(5), || {
            version_on_two(None)
        })
        .await;
        println!("a domain created on one instance was in force on the other after {lag:?}");
    }
}
