//! The load generator's checks can fail: against an app whose user limit was raised it
//! names the broken rule when told the limit it expects; against the real configuration
//! every check passes; and the limits it is not told are the ones the app runs.

use std::time::Duration;

use loadgen::{Config, ItemChoice, Limit, Limits, Load, Stores};
use secrecy::ExposeSecret;
use sqlx::PgPool;

use seckill_test_support::{spawn_app_with, TestApp, ADMIN_TOKEN};

pub(crate) fn config(app: &TestApp) -> Config {
    Config {
        targets: vec![app.address.clone()],
        item: ItemChoice::Create { stock: 100 },
        users: 30,
        first_user: 1,
        ips: 30,
        load: Load::Concurrency(16),
        duration: Duration::from_secs(30),
        // Four attempts per user: one more than the user limit.
        max_requests: Some(120),
        // Nothing given: every limit is read from the app's `seckill` policy.
        limits: Limits::default(),
        admin_token: ADMIN_TOKEN.into(),
        stores: Some(Stores {
            database_url: app.settings.database_url.expose_secret().to_string(),
            redis_url: match app.settings.redis_cluster_nodes.expose_secret() {
                "" => app.settings.redis_url.expose_secret().to_string(),
                nodes => nodes.to_string(),
            },
            redis_prefix: app.settings.redis_key_prefix.clone(),
        }),
        progress: false,
        probe: None,
    }
}

#[sqlx::test]
async fn against_the_real_limits_every_check_passes(db: PgPool) {
    let app = spawn_app_with(&db, |_| {}).await;
    let report = loadgen::run(config(&app)).await.expect("the run completes");
    assert!(report.passed(), "failed: {:?}", report.failed_checks());
    assert_eq!(report.requests, 120);
    assert_eq!(report.count(200), 30, "one order per user");
    assert_eq!(report.by_code.get("ALREADY_PURCHASED").copied(), Some(60));
    assert_eq!(
        report.by_dimension.get("user").copied(),
        Some(30),
        "each user's fourth attempt"
    );
}

#[sqlx::test]
async fn a_raised_user_limit_is_caught_and_named(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        s.limiter.policies.get_mut("seckill").unwrap().rules[1].threshold = 10;
    })
    .await;
    // Told the limit it expects, loadgen holds the app to it.
    let mut told = config(&app);
    told.limits.user = Limit {
        count: 3,
        window: Duration::from_secs(60),
    }
    .into();
    let report = loadgen::run(told).await.expect("the run completes");
    assert!(!report.passed());
    assert_eq!(report.failed_checks(), vec!["user limit"]);
    // Told nothing, it holds the app to the limit the app runs: 10 per minute (other
    // users and addresses, the same item).
    let mut second = config(&app);
    second.item = ItemChoice::Existing(report.item_id);
    second.first_user = 31;
    let options = loadgen::Options {
        first_ip: 30,
        ..Default::default()
    };
    let report = loadgen::run_with(second, options)
        .await
        .expect("the run completes");
    assert!(report.passed(), "failed: {:?}", report.failed_checks());
    let user = report.checks.iter().find(|c| c.name == "user limit");
    assert_eq!(
        user.map(|c| c.detail.as_str()),
        Some(
            "no key admitted more than 10 per 60s, even counting the 0 lost answers as admissions"
        )
    );
}

#[sqlx::test]
async fn phases_are_cut_from_the_run_and_redis_is_judged_after_a_reconciler_round(db: PgPool) {
    let app = spawn_app_with(&db, |s| s.reconcile_interval_ms = 200).await;
    let dir = tempfile::tempdir().expect("a temporary folder");
    let phases = dir.path().join("phases.txt");
    // The whole run and a window that ended before it began (empty, not an error).
    let now_ms = chrono::Utc::now().timestamp_millis();
    std::fs::write(
        &phases,
        format!("all {} {}\nbefore 0 1\n", now_ms - 60_000, now_ms + 600_000),
    )
    .expect("the phases file");
    let options = loadgen::Options {
        phases_file: Some(phases),
        await_reconciliation: Some(Duration::from_secs(30)),
        ..Default::default()
    };
    let report = loadgen::run_with(config(&app), options)
        .await
        .expect("the run completes");
    assert!(report.passed(), "failed: {:?}", report.failed_checks());
    let names: Vec<_> = report.checks.iter().map(|c| c.name.as_str()).collect();
    for check in [
        "reconciled",
        "every 200 has its order",
        "no oversell",
        "redis buyers match orders",
    ] {
        assert!(names.contains(&check), "{check} missing from {names:?}");
    }
    assert_eq!(report.phases.len(), 2);
    assert_eq!(report.phases[0].requests, report.requests);
    assert_eq!(report.phases[1].requests, 0);
    assert_eq!(report.unknown_outcomes, 0);
    assert!(report.by_cause.is_empty(), "{:?}", report.by_cause);
}
