//! The edge's decision without a transport (`Edge::decide`, issue 40): the bound on a
//! domain's distinct keys, and counts that survive an edit elsewhere in the document.
//! The gRPC server's and the NGINX gate's tests ask the same engine through the wire.

use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;

use seckill::edge::{Code, Descriptor, EdgeRequest, EdgeVerdict, Entry};
use seckill_test_support::{spawn_app_with, TestApp};

fn by_address(address: &str) -> EdgeRequest {
    EdgeRequest {
        domain: "gateway".into(),
        descriptors: vec![Descriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: address.into(),
            }],
            hits_addend: None,
        }],
        hits_addend: 0,
    }
}

async fn put(app: &TestApp, document: Value) {
    let response = app
        .rls_domain(Method::PUT, "gateway", Some(document), None)
        .await;
    assert!(response.status().is_success(), "{}", response.status());
}

async fn decide(app: &TestApp, request: &EdgeRequest) -> EdgeVerdict {
    app.edge.decide(request).await.expect("a valid request")
}

#[sqlx::test]
async fn a_domain_counts_at_most_its_bound_of_distinct_keys_and_a_refused_one_writes_nothing(
    db: PgPool,
) {
    let app = spawn_app_with(&db, |s| s.rls_max_keys = 3).await;
    put(
        &app,
        json!({
            "domain": "gateway",
            "descriptors": [{
                "key": "remote_address",
                "rate_limit": { "unit": "minute", "requests_per_unit": 10 }
            }]
        }),
    )
    .await;
    let mut codes = Vec::new();
    for address in ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.1"] {
        codes.push(decide(&app, &by_address(address)).await.overall);
    }
    assert_eq!(
        codes,
        [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit, Code::Ok],
        "the fourth address finds no room; a known one still counts"
    );
    let mut redis = app.redis().await;
    let pattern = format!("{}:{{rls:gateway}}:*", app.settings.redis_key_prefix);
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut redis)
        .await
        .expect("KEYS");
    keys.sort();
    assert_eq!(keys.len(), 4, "three counters and the registry: {keys:?}");
    assert!(
        keys.iter().all(|key| !key.contains("10.0.0.4")),
        "the refused address has no counter: {keys:?}"
    );
}

#[sqlx::test]
async fn an_edit_elsewhere_in_the_document_keeps_each_limits_count(db: PgPool) {
    let app = spawn_app_with(&db, |_| {}).await;
    let by_address = json!({
        "key": "remote_address",
        "rate_limit": { "unit": "minute", "requests_per_unit": 2 }
    });
    put(
        &app,
        json!({ "domain": "gateway", "descriptors": [by_address.clone()] }),
    )
    .await;
    let first = decide(&app, &by_address_request()).await;
    assert_eq!(
        (first.overall, first.statuses[0].limit_remaining),
        (Code::Ok, 1)
    );
    // A limit added before it renumbers the rules; the address's count stays its own.
    put(
        &app,
        json!({
            "domain": "gateway",
            "descriptors": [
                { "key": "path", "rate_limit": { "unit": "second", "requests_per_unit": 9 } },
                by_address
            ]
        }),
    )
    .await;
    let version = app.domains.current("gateway").map(|d| d.version);
    assert_eq!(version, Some(2), "this instance reloaded on its own write");
    let codes = [
        decide(&app, &by_address_request()).await.overall,
        decide(&app, &by_address_request()).await.overall,
    ];
    assert_eq!(codes, [Code::Ok, Code::OverLimit]);
}

fn by_address_request() -> EdgeRequest {
    by_address("192.0.2.7")
}

#[sqlx::test]
async fn the_denial_cache_repeats_a_refusal_until_an_edit_raises_the_limit(db: PgPool) {
    let app = spawn_app_with(&db, |_| {}).await;
    let limited = |requests: u32| {
        json!({
            "domain": "gateway",
            "descriptors": [{
                "key": "remote_address",
                "rate_limit": { "name": "per_address", "unit": "hour", "requests_per_unit": requests }
            }]
        })
    };
    put(&app, limited(1)).await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(decide(&app, &by_address_request()).await.overall);
    }
    assert_eq!(codes, [Code::Ok, Code::OverLimit, Code::OverLimit]);
    let local = r#"seckill_rls_local_refusals_total{domain="gateway",rule="per_address"}"#;
    assert_eq!(
        app.metric_sum(local).await,
        2.0,
        "both from the cache: the admission that took the last place taught it"
    );
    put(&app, limited(5)).await;
    let raised = decide(&app, &by_address_request()).await;
    assert_eq!(
        (raised.overall, raised.statuses[0].limit_remaining),
        (Code::Ok, 3),
        "at once: the edit's version retired the cached refusal"
    );
}
