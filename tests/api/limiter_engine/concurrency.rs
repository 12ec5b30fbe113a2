//! Many callers at once: exactly the threshold admitted, by Redis or, behind an expired
//! denial, by one probe at a time.

use std::sync::Arc;

use seckill::limiter::policy::KeySource;
use seckill::limiter::Algorithm;

use super::{caller, engine, rule, Engine};

/// `count` callers (users 1..=count) checked at the same time; how many were admitted.
async fn concurrent_checks(engine: &Engine, count: u64) -> u64 {
    let tasks: Vec<_> = (0..count)
        .map(|i| {
            let limiter = Arc::clone(&engine.limiter);
            tokio::spawn(async move {
                limiter
                    .check("p", None, &caller(i as i64 + 1))
                    .await
                    .is_ok()
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += u64::from(task.await.unwrap());
    }
    admitted
}

async fn exactly_threshold_of_ten_times_threshold_concurrent_requests_pass(algorithm: Algorithm) {
    let threshold = 25;
    let engine = engine(
        algorithm,
        vec![rule(
            "only",
            KeySource::Literal("all".into()),
            60_000,
            threshold,
        )],
    )
    .await;
    assert_eq!(concurrent_checks(&engine, threshold * 10).await, threshold);
    assert_eq!(engine.counter("fail_open", &["p"]), 0);
    assert_eq!(
        engine.counter("decisions", &["p", "only", "pass"]),
        threshold
    );
    assert_eq!(
        engine.counter("decisions", &["p", "only", "reject"]),
        threshold * 9
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sliding_window_admits_exactly_threshold_under_concurrency() {
    exactly_threshold_of_ten_times_threshold_concurrent_requests_pass(Algorithm::SlidingWindow)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn token_bucket_admits_exactly_capacity_under_concurrency() {
    exactly_threshold_of_ten_times_threshold_concurrent_requests_pass(Algorithm::TokenBucket).await;
}

/// After a denial expires, concurrent callers queue behind one probe at a time: still
/// exactly the freed slot is admitted, and the other refusals never reach Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_behind_an_expired_denial_get_exactly_the_freed_slot() {
    let threshold = 5;
    let engine = engine(
        Algorithm::SlidingWindow,
        vec![rule(
            "only",
            KeySource::Literal("all".into()),
            1_000,
            threshold,
        )],
    )
    .await;
    let limiter_calls = || {
        engine
            .metrics
            .redis_calls
            .with_label_values(&["limiter"])
            .get()
    };
    // Five admissions one millisecond apart fill the window; then it refuses.
    for _ in 0..threshold {
        assert!(engine.check(&caller(1)).await.is_ok());
        engine.clock.advance_ms(1);
    }
    assert_eq!(concurrent_checks(&engine, 50).await, 0);
    // The oldest entry expires: exactly one slot is free.
    engine.clock.advance_ms(1_000 - threshold as i64);
    let calls_before = limiter_calls();
    assert_eq!(
        concurrent_checks(&engine, 200).await,
        1,
        "the window freed exactly one slot"
    );
    let calls = limiter_calls() - calls_before;
    assert!(
        calls <= 5,
        "{calls} limiter calls for 200 callers: one probe admitted, one refused, the rest local"
    );
    assert_eq!(
        engine.counter("decisions", &["p", "only", "reject"]),
        50 + 199
    );
}
