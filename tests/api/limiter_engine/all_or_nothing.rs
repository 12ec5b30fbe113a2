//! All-or-nothing: a refusal by any rule leaves every key of every rule as it was.

use std::sync::Arc;

use seckill::limiter::backend::Decision;
use seckill::limiter::policy::{KeySource, RuleConfig};
use seckill::limiter::{Algorithm, Answer, AnsweredBy, Clock, FailMode, Limiter};

use super::{caller, engine_with_denial_cache, one_policy, refused, rule, Engine};

/// Rule 1 keyed by user, rule 2 shared by everyone (2 per minute), rule 3 keyed by user
/// again: the middle one refuses first.
fn first_second_third() -> Vec<RuleConfig> {
    vec![
        rule("first", KeySource::User, 60_000, 10),
        rule("second", KeySource::Literal("shared".into()), 60_000, 2),
        rule("third", KeySource::User, 60_000, 10),
    ]
}

/// The script's all-or-nothing, so asked of Redis every time (no denial cache).
async fn a_full_middle_rule_refuses_and_leaves_every_key_untouched(algorithm: Algorithm) {
    let engine = engine_with_denial_cache(algorithm, first_second_third(), 0).await;
    assert!(engine.check(&caller(1)).await.is_ok());
    engine.clock.advance_ms(5);
    assert!(engine.check(&caller(2)).await.is_ok()); // fills "second"

    let keys = [
        engine.key(algorithm, "first", "1"),
        engine.key(algorithm, "second", "lit:shared"),
        engine.key(algorithm, "third", "1"),
    ];
    let mut before = Vec::new();
    for key in &keys {
        before.push(engine.snapshot(key).await);
    }
    engine.clock.advance_ms(5);
    let refusal = refused(engine.check(&caller(1)).await);
    assert_eq!(refusal.dimension(), "second");
    assert_eq!(refusal.rule, 1);
    assert_eq!(refusal.message(), "second says no");
    for (key, before) in keys.iter().zip(before) {
        assert_eq!(engine.snapshot(key).await, before, "{key} changed");
    }
    // A refused caller that was never admitted leaves no key at all.
    let refusal = refused(engine.check(&caller(3)).await);
    assert_eq!(refusal.dimension(), "second");
    assert!(engine
        .snapshot(&engine.key(algorithm, "first", "3"))
        .await
        .is_empty());
    assert!(engine
        .snapshot(&engine.key(algorithm, "third", "3"))
        .await
        .is_empty());
}

/// Caller 1's keys of [`first_second_third`], each with its serialized value (`DUMP`) and
/// absolute expiry (`PEXPIRETIME`).
async fn dumps(engine: &Engine, algorithm: Algorithm) -> Vec<(String, Option<Vec<u8>>, i64)> {
    let mut all = Vec::new();
    for (rule, value) in [("first", "1"), ("second", "lit:shared"), ("third", "1")] {
        let key = engine.key(algorithm, rule, value);
        all.push((
            key.clone(),
            engine.dump(&key).await,
            engine.expire_time(&key).await,
        ));
    }
    all
}

/// Asked of Redis (no denial cache), a refusal leaves every key exactly as it was: the
/// serialized value (`DUMP`) and the absolute expiry (`PEXPIRETIME`).
/// With `redis_clock` the scripts read Redis `TIME`, as in production by default.
async fn a_refused_call_leaves_every_key_byte_for_byte_unchanged(
    algorithm: Algorithm,
    redis_clock: bool,
) {
    let mut engine = engine_with_denial_cache(algorithm, first_second_third(), 0).await;
    if redis_clock {
        let settings = one_policy(algorithm, FailMode::Open, first_second_third(), 0);
        let limiter = Limiter::new(engine.redis.clone(), &settings, Arc::clone(&engine.metrics))
            .expect("valid policies")
            .with_clock(Clock::Redis);
        engine.limiter = Arc::new(limiter);
    }
    assert!(engine.check(&caller(1)).await.is_ok());
    engine.clock.advance_ms(7);
    assert!(engine.check(&caller(1)).await.is_ok());
    let before = dumps(&engine, algorithm).await;
    assert!(before.iter().all(|(_, dump, at)| dump.is_some() && *at > 0));
    for _ in 0..3 {
        engine.clock.advance_ms(3);
        let refusal = refused(engine.check(&caller(1)).await);
        assert!(!refusal.local, "asked of Redis");
        assert_eq!(refusal.dimension(), "second");
    }
    assert_eq!(dumps(&engine, algorithm).await, before);
}

#[tokio::test]
async fn a_refused_sliding_window_call_writes_nothing() {
    a_refused_call_leaves_every_key_byte_for_byte_unchanged(Algorithm::SlidingWindow, false).await;
}

#[tokio::test]
async fn a_refused_sliding_window_call_writes_nothing_with_the_redis_clock() {
    a_refused_call_leaves_every_key_byte_for_byte_unchanged(Algorithm::SlidingWindow, true).await;
}

#[tokio::test]
async fn a_refused_token_bucket_call_writes_nothing() {
    a_refused_call_leaves_every_key_byte_for_byte_unchanged(Algorithm::TokenBucket, false).await;
}

#[tokio::test]
async fn a_refused_token_bucket_call_writes_nothing_with_the_redis_clock() {
    a_refused_call_leaves_every_key_byte_for_byte_unchanged(Algorithm::TokenBucket, true).await;
}

#[tokio::test]
async fn sliding_window_is_all_or_nothing() {
    a_full_middle_rule_refuses_and_leaves_every_key_untouched(Algorithm::SlidingWindow).await;
}

#[tokio::test]
async fn token_bucket_is_all_or_nothing() {
    a_full_middle_rule_refuses_and_leaves_every_key_untouched(Algorithm::TokenBucket).await;
}

/// A cost one rule cannot take refuses the request, and leaves every key of every rule
/// byte for byte as it was, whatever the other rules' costs: a cost above what is left
/// (3 of the shared 2 per minute, after 1) and one above the whole quota (1 000).
#[tokio::test]
async fn a_refused_cost_writes_nothing_under_any_algorithm() {
    for algorithm in Algorithm::ALL {
        let engine = engine_with_denial_cache(algorithm, first_second_third(), 0).await;
        let admitted = engine.ask(algorithm, &caller(1), &[1, 1, 1], 0).await;
        let Answer::Decided {
            decision: Decision::Admitted { .. },
            rule_remaining,
            ..
        } = admitted
        else {
            panic!("{algorithm}: {admitted:?}");
        };
        assert_eq!(rule_remaining.len(), 3, "{algorithm}");
        let before = dumps(&engine, algorithm).await;
        for costs in [[1, 3, 1], [1, 1_000, 1], [1_000, 1_000, 1_000]] {
            engine.clock.advance_ms(3);
            let answer = engine.ask(algorithm, &caller(1), &costs, 0).await;
            let Answer::Decided {
                decision: Decision::Refused { retry_after_ms, .. },
                rule_remaining,
                by: AnsweredBy::Redis,
            } = answer
            else {
                panic!("{algorithm} {costs:?}: {answer:?}");
            };
            assert!(
                retry_after_ms >= 1 && rule_remaining.is_empty(),
                "{algorithm}"
            );
        }
        assert_eq!(dumps(&engine, algorithm).await, before, "{algorithm}");
    }
}
