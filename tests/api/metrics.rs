//! `/metrics` tells the truth: exact values after a known sequence, and every metric the
//! shipped Grafana dashboard and Prometheus alerts query is exported by a running app.

use std::collections::BTreeSet;
use std::time::Duration;

use sqlx::PgPool;

use seckill_test_support::{spawn_app, spawn_app_with};

#[sqlx::test]
async fn four_purchase_attempts_by_one_user_show_exactly_one_user_rejection(db: PgPool) {
    let app = spawn_app(&db).await;
    let item = app.open_item(10).await;
    let token = app.token_for(61).await;
    let statuses: Vec<u16> = {
        let mut statuses = Vec::new();
        for _ in 0..4 {
            statuses.push(
                app.post_seckill(&token, item, "10.40.0.1")
                    .await
                    .status()
                    .as_u16(),
            );
        }
        statuses
    };
    assert_eq!(statuses, [200, 409, 409, 429]);
    assert_eq!(app.get("/no/such/page").await.status(), 404);

    let expect = [
        (
            r#"seckill_limiter_decisions_total{dimension="user",outcome="reject",policy="seckill"}"#,
            1.0,
        ),
        (
            r#"seckill_limiter_decisions_total{dimension="user",outcome="pass",policy="seckill"}"#,
            3.0,
        ),
        (
            r#"seckill_limiter_decisions_total{dimension="ip",outcome="reject",policy="seckill"}"#,
            0.0,
        ),
        (r#"seckill_sale_outcomes_total{outcome="created"}"#, 1.0),
        (
            r#"seckill_sale_outcomes_total{outcome="already_purchased"}"#,
            2.0,
        ),
        (
            r#"seckill_sale_outcomes_total{outcome="rate_limited"}"#,
            1.0,
        ),
        (r#"seckill_sale_outcomes_total{outcome="sold_out"}"#, 0.0),
        (
            r#"seckill_http_requests_total{method="POST",route="/seckill",status="2xx"}"#,
            1.0,
        ),
        (
            r#"seckill_http_requests_total{method="POST",route="/seckill",status="4xx"}"#,
            3.0,
        ),
        (
            r#"seckill_http_requests_total{method="GET",route="unmatched",status="4xx"}"#,
            1.0,
        ),
        // The third admission took the user's last slot, so the fourth attempt is
        // refused by the denial cache without a limiter call.
        (r#"seckill_redis_calls_total{purpose="limiter"}"#, 3.0),
        (
            r#"seckill_limiter_local_refusals_total{dimension="user",policy="seckill"}"#,
            1.0,
        ),
        (r#"seckill_redis_calls_total{purpose="pipeline"}"#, 1.0),
        (r#"seckill_limiter_fail_open_total{policy="seckill"}"#, 0.0),
        ("seckill_order_commit_duration_seconds_count", 1.0),
    ];
    for (series, value) in expect {
        assert_eq!(app.metric_sum(series).await, value, "{series}");
    }
}

/// Metric names (`seckill_…`) a text mentions.
fn referenced_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(start) = rest.find("seckill_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// A queried name is exported if a sample line carries it, or, for a histogram's family
/// name, its `_bucket` samples.
fn exported(exposition: &str, name: &str) -> bool {
    let family_bucket = format!("{name}_bucket");
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .any(|line| {
            let sample = line.split(['{', ' ']).next().unwrap_or_default();
            sample == name || sample == family_bucket
        })
}

#[sqlx::test]
async fn every_metric_the_dashboard_and_alerts_query_is_exported(db: PgPool) {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut sources = Vec::new();
    for dir in ["deploy/grafana/dashboards", "deploy/prometheus"] {
        for entry in std::fs::read_dir(format!("{root}/{dir}")).expect("the deploy folder exists") {
            let path = entry.unwrap().path();
            let is_query_file = path.extension().is_some_and(|e| e == "json")
                || path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().contains("alert"));
            if is_query_file {
                sources.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let wanted: BTreeSet<String> = sources.iter().flat_map(|s| referenced_metrics(s)).collect();
    assert!(
        wanted.len() >= 10,
        "the dashboard and alerts query the app's metrics: {wanted:?}"
    );

    // Per-item series exist only while something is on sale: sell something first.
    let app = spawn_app_with(&db, |s| s.consistency_interval_secs = 1).await;
    let item = app.open_item(10).await;
    let token = app.token_for(62).await;
    assert_eq!(
        app.post_seckill(&token, item, "10.41.0.1").await.status(),
        200
    );

    // The per-item gauges are refreshed every second: poll until they are all there.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        let exposition = app.get("/metrics").await.text().await.unwrap();
        let missing: Vec<_> = wanted
            .iter()
            .filter(|name| !exported(&exposition, name))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "queried but not exported: {missing:?}"
        );
    }
}
