//! Time: windows that slide and buckets that refill on the frozen clock, the waits a
//! refusal announces, and app clocks that disagree.

use std::sync::Arc;

use actix_web::http::header::HeaderMap;
use seckill::http::rate_limit_headers::RateLimitHeaders;
use seckill::limiter::policy::KeySource;
use seckill::limiter::{Algorithm, Clock, FailMode, Limiter, ManualClock};

use super::{caller, engine_with_denial_cache, one_policy, refused, rule};

/// Redis's own answer (no denial cache, which knows only the rules it saw refuse).
#[tokio::test]
async fn with_two_full_rules_retry_after_is_the_longer_wait() {
    let engine = engine_with_denial_cache(
        Algorithm::SlidingWindow,
        vec![
            rule("short", KeySource::Literal("s".into()), 10_000, 1),
            rule("long", KeySource::Literal("l".into()), 30_000, 1),
        ],
        0,
    )
    .await;
    assert!(engine.check(&caller(1)).await.is_ok());
    engine.clock.advance_ms(1_000);
    let refusal = refused(engine.check(&caller(1)).await);
    assert_eq!(refusal.dimension(), "short");
    assert_eq!(
        (refusal.own_wait_ms, refusal.longest_wait_ms),
        (9_000, 29_000)
    );
    assert_eq!(refusal.retry_after_ms(), 29_000);

    let mut headers = HeaderMap::new();
    refusal.write_headers(&mut headers);
    let header = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_string();
    assert_eq!(header("retry-after-ms"), "29000");
    assert_eq!(header("retry-after"), "29");
    assert_eq!(header("x-ratelimit-remaining"), "0");
    assert_eq!(header("x-ratelimit-policy"), "sliding_window");
    assert_eq!(
        header("ratelimit-policy"),
        r#""short";q=1;w=10, "long";q=1;w=30"#
    );
    assert_eq!(header("ratelimit"), r#""short";r=0;t=9"#);
}

#[tokio::test]
async fn sliding_window_counts_same_millisecond_requests_and_readmits_after_the_window() {
    let algorithm = Algorithm::SlidingWindow;
    // The script's own waits: asked of Redis every time (no denial cache).
    let engine =
        engine_with_denial_cache(algorithm, vec![rule("only", KeySource::User, 60_000, 2)], 0)
            .await;
    // The clock is frozen: all three requests share one millisecond.
    assert!(engine.check(&caller(1)).await.is_ok());
    assert!(engine.check(&caller(1)).await.is_ok());
    let refusal = refused(engine.check(&caller(1)).await);
    assert_eq!(refusal.retry_after_ms(), 60_000);

    let key = engine.key(algorithm, "only", "1");
    assert_eq!(
        engine.snapshot(&key).await.len(),
        4,
        "two members with their scores"
    );
    let ttl = engine.pttl(&key).await;
    assert!(ttl > 0 && ttl <= 60_000, "ttl {ttl}");

    engine.clock.advance_ms(59_999);
    let refusal = refused(engine.check(&caller(1)).await);
    assert_eq!(refusal.retry_after_ms(), 1);
    engine.clock.advance_ms(1);
    let admission = engine
        .check(&caller(1))
        .await
        .expect("the window has passed");
    assert_eq!(admission.quota_left.unwrap().remaining, 1);
}

#[tokio::test]
async fn token_bucket_refills_at_the_configured_rate() {
    let algorithm = Algorithm::TokenBucket;
    let mut bucket = rule("only", KeySource::User, 60_000, 3);
    bucket.refill_tokens = Some(1);
    bucket.refill_ms = Some(1_000);
    // The script's own refill: asked of Redis every time (no denial cache).
    let engine = engine_with_denial_cache(algorithm, vec![bucket], 0).await;
    for expected_left in [2, 1, 0] {
        let admission = engine.check(&caller(1)).await.expect("a token is left");
        assert_eq!(admission.quota_left.unwrap().remaining, expected_left);
    }
    let refusal = refused(engine.check(&caller(1)).await);
    assert_eq!(refusal.retry_after_ms(), 1_000);

    let key = engine.key(algorithm, "only", "1");
    let ttl = engine.pttl(&key).await;
    assert!(
        ttl > 0 && ttl <= 3_000,
        "ttl is the time to refill completely: {ttl}"
    );

    engine.clock.advance_ms(999);
    assert_eq!(refused(engine.check(&caller(1)).await).retry_after_ms(), 1);
    engine.clock.advance_ms(1);
    assert!(engine.check(&caller(1)).await.is_ok(), "one token refilled");
    assert!(engine.check(&caller(1)).await.is_err(), "and only one");
    engine.clock.advance_ms(10_000);
    for _ in 0..3 {
        assert!(
            engine.check(&caller(1)).await.is_ok(),
            "refilled up to capacity"
        );
    }
    assert!(
        engine.check(&caller(1)).await.is_err(),
        "never beyond capacity"
    );
}

/// Two instances whose app clocks are 30 s apart share one token bucket (10 per 60 s):
/// the slow one must never move the bucket's time back, or the fast one refills the
/// skew again on every call. Over 120 s at most capacity + rate × 120 s = 30 pass.
#[tokio::test]
async fn skewed_app_clocks_never_refill_a_token_bucket_twice() {
    let mut bucket = rule("only", KeySource::Literal("all".into()), 60_000, 10);
    bucket.refill_tokens = Some(10);
    bucket.refill_ms = Some(60_000);
    let fast = engine_with_denial_cache(Algorithm::TokenBucket, vec![bucket.clone()], 0).await;
    let slow_clock = ManualClock::starting_at(fast.clock.now_ms() - 30_000);
    let slow = Limiter::new(
        fast.redis.clone(),
        &one_policy(Algorithm::TokenBucket, FailMode::Open, vec![bucket], 0),
        Arc::clone(&fast.metrics),
    )
    .expect("valid policies")
    .with_clock(Clock::Manual(slow_clock.clone()));

    let mut admitted = 0;
    for step in 0..480 {
        let limiter = if step % 2 == 0 { &fast.limiter } else { &slow };
        admitted += u32::from(limiter.check("p", None, &caller(1)).await.is_ok());
        fast.clock.advance_ms(250);
        slow_clock.advance_ms(250);
    }
    assert!(admitted <= 30, "{admitted} of 480 admitted in 120 s");
}
