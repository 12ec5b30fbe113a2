//! Policies edited at run time: disabled and enabled, re-applied unchanged, a refill
//! period or a window changed under a full key (its tokens and its TTL kept), and a
//! bucket stored before its scale was.

use std::collections::BTreeMap;

use seckill::limiter::keys::ClientKey;
use seckill::limiter::policy::{KeySource, PolicyConfig};
use seckill::limiter::{Algorithm, Caller, FailMode, Scope};

use super::{caller, engine, engine_with_denial_cache, refused, rule};

#[tokio::test]
async fn a_disabled_policy_admits_without_asking_redis() {
    let engine = engine(
        Algorithm::SlidingWindow,
        vec![rule("only", KeySource::User, 60_000, 1)],
    )
    .await;
    let mut policies = BTreeMap::new();
    let mut config = PolicyConfig {
        scope: Scope::Global,
        algorithm: Algorithm::SlidingWindow,
        fail_mode: FailMode::Closed,
        enabled: false,
        rules: vec![rule("only", KeySource::User, 60_000, 1)],
    };
    policies.insert("p".to_string(), config.clone());
    engine
        .limiter
        .replace_policies(seckill::limiter::PolicySet::parse(&policies).unwrap());
    for _ in 0..3 {
        let admission = engine.check(&caller(1)).await.expect("admitted");
        assert!(admission.quota_left.is_none(), "no decision was asked for");
    }
    assert!(engine
        .snapshot(&engine.key(Algorithm::SlidingWindow, "only", "1"))
        .await
        .is_empty());

    config.enabled = true;
    policies.insert("p".to_string(), config);
    engine
        .limiter
        .replace_policies(seckill::limiter::PolicySet::parse(&policies).unwrap());
    assert!(engine.check(&caller(1)).await.is_ok());
    assert!(
        engine.check(&caller(1)).await.is_err(),
        "enabled again, the limit holds"
    );
}

#[tokio::test]
async fn re_applying_unchanged_rules_keeps_the_denials_and_a_real_change_retires_them() {
    let rules = vec![rule("only", KeySource::User, 60_000, 1)];
    let engine = engine(Algorithm::SlidingWindow, rules.clone()).await;
    assert!(engine.check(&caller(1)).await.is_ok(), "took the only slot");
    assert!(
        refused(engine.check(&caller(1)).await).local,
        "so the cache refuses"
    );

    let mut policies = BTreeMap::new();
    let mut config = PolicyConfig {
        scope: Scope::Global,
        algorithm: Algorithm::SlidingWindow,
        fail_mode: FailMode::Open,
        enabled: true,
        rules,
    };
    policies.insert("p".to_string(), config.clone());
    let set = |policies: &BTreeMap<String, PolicyConfig>| {
        seckill::limiter::PolicySet::parse(policies).unwrap()
    };
    engine.limiter.replace_policies(set(&policies));
    assert!(
        refused(engine.check(&caller(1)).await).local,
        "the same rules again: the denial stands"
    );

    config.rules[0].threshold = 2;
    policies.insert("p".to_string(), config);
    engine.limiter.replace_policies(set(&policies));
    assert!(
        engine.check(&caller(1)).await.is_ok(),
        "raised to 2: Redis admits the second request"
    );
}

/// A bucket of 10 per 60 s left with 3.5 tokens, then its refill period edited to
/// `refill_ms`: the 3.5 tokens stay 3.5 tokens, whatever scale they were stored in.
/// Returns what the next calls (at the same instant) got: the remaining count of each
/// admission, then the refusal's wait.
async fn tokens_after_a_refill_period_edit(refill_ms: u64) -> (Vec<i64>, u64) {
    let algorithm = Algorithm::TokenBucket;
    let bucket = |refill_ms| {
        let mut bucket = rule("only", KeySource::User, 60_000, 10);
        bucket.refill_tokens = Some(10);
        bucket.refill_ms = Some(refill_ms);
        vec![bucket]
    };
    // Asked of Redis every time (no denial cache): the script's own arithmetic.
    let engine = engine_with_denial_cache(algorithm, bucket(60_000), 0).await;
    for expected_left in (4..10).rev() {
        let admission = engine.check(&caller(1)).await.expect("a token is left");
        assert_eq!(admission.quota_left.unwrap().remaining, expected_left);
    }
    // One token per 6 s: 4.5 tokens, and one more call stores 3.5.
    engine.clock.advance_ms(3_000);
    let admission = engine.check(&caller(1)).await.expect("a token is left");
    assert_eq!(admission.quota_left.unwrap().remaining, 3);

    engine.set_rules(algorithm, bucket(refill_ms));
    let mut remaining = Vec::new();
    for _ in 0..20 {
        match engine.check(&caller(1)).await {
            Ok(admission) => remaining.push(admission.quota_left.unwrap().remaining),
            Err(rejection) => return (remaining, refused(Err(rejection)).retry_after_ms()),
        }
    }
    panic!("20 admissions from a bucket of 10: {remaining:?}");
}

#[tokio::test]
async fn a_lengthened_refill_period_keeps_the_tokens_a_bucket_held() {
    // Then the missing half token takes 120 s / 10 / 2 = 6 s.
    assert_eq!(
        tokens_after_a_refill_period_edit(120_000).await,
        (vec![2, 1, 0], 6_000)
    );
}

#[tokio::test]
async fn a_shortened_refill_period_keeps_the_tokens_a_bucket_held() {
    // Then the missing half token takes 30 s / 10 / 2 = 1.5 s.
    assert_eq!(
        tokens_after_a_refill_period_edit(30_000).await,
        (vec![2, 1, 0], 1_500)
    );
}

/// A bucket written before `scale` was stored is read in the rule's scale, as before;
/// the next admission stores the scale.
#[tokio::test]
async fn a_bucket_stored_without_its_scale_is_read_in_the_rules_scale() {
    let algorithm = Algorithm::TokenBucket;
    let mut bucket = rule("only", KeySource::User, 60_000, 10);
    bucket.refill_tokens = Some(10);
    bucket.refill_ms = Some(60_000);
    let engine = engine_with_denial_cache(algorithm, vec![bucket], 0).await;
    let key = engine.key(algorithm, "only", "1");
    let now = engine.clock.now_ms();
    // Two tokens, scaled by the 60 s refill period.
    let _: () = engine
        .query(
            redis::cmd("HSET")
                .arg(&key)
                .arg("tokens")
                .arg(120_000)
                .arg("refilled_at")
                .arg(now),
        )
        .await;
    let admission = engine.check(&caller(1)).await.expect("two tokens");
    assert_eq!(admission.quota_left.unwrap().remaining, 1);
    // One token left (60 000 units), at `now`, in a scale of 60 000 (sorted).
    let mut stored = vec!["60000", "60000", "refilled_at", "scale", "tokens"];
    let now = now.to_string();
    stored.push(&now);
    stored.sort();
    assert_eq!(engine.snapshot(&key).await, stored);
    assert!(engine.check(&caller(1)).await.is_ok());
    assert_eq!(
        refused(engine.check(&caller(1)).await).retry_after_ms(),
        6_000
    );
}

/// A full window of 3 per 1 s raised to 5 s: its entries now count for 5 s, so the key
/// must outlive the 1 s TTL it was given. A refused call extends it.
#[tokio::test]
async fn a_raised_window_keeps_a_full_key_for_the_whole_new_window() {
    let algorithm = Algorithm::SlidingWindow;
    let window = |window_ms| vec![rule("only", KeySource::User, window_ms, 3)];
    let engine = engine_with_denial_cache(algorithm, window(1_000), 0).await;
    // The frozen clock: all three in one millisecond.
    for _ in 0..3 {
        assert!(engine.check(&caller(1)).await.is_ok());
    }
    engine.set_rules(algorithm, window(5_000));
    assert_eq!(
        refused(engine.check(&caller(1)).await).retry_after_ms(),
        5_000
    );

    // The key's old TTL (at most 1 s of Redis time) has passed; 1 s passes for the
    // limiter too.
    engine.redis_time_passes(1_000).await;
    engine.clock.advance_ms(1_000);
    let refusal = refused(engine.check(&caller(1)).await);
    assert_eq!(
        refusal.retry_after_ms(),
        4_000,
        "the three entries still count"
    );
}

/// An empty bucket (2 per 1 s) whose refill is slowed to 2 per 5 s: it now takes 5 s to
/// fill, so the key must outlive the 1 s TTL it was given (a missing key is a full
/// bucket). A refused call extends it.
#[tokio::test]
async fn a_slowed_refill_keeps_an_empty_bucket_for_its_whole_refill() {
    let algorithm = Algorithm::TokenBucket;
    let bucket = |refill_ms| {
        let mut bucket = rule("only", KeySource::User, 1_000, 2);
        bucket.refill_tokens = Some(2);
        bucket.refill_ms = Some(refill_ms);
        vec![bucket]
    };
    let engine = engine_with_denial_cache(algorithm, bucket(1_000), 0).await;
    for _ in 0..2 {
        assert!(engine.check(&caller(1)).await.is_ok());
    }
    engine.set_rules(algorithm, bucket(5_000));
    assert_eq!(
        refused(engine.check(&caller(1)).await).retry_after_ms(),
        2_500
    );

    engine.redis_time_passes(1_000).await;
    // 1 s refills 2 × 1/5 = 0.4 of a token: 0.6 × 2.5 s to go.
    engine.clock.advance_ms(1_000);
    let refusal = refused(engine.check(&caller(1)).await);
    assert_eq!(
        refusal.retry_after_ms(),
        1_500,
        "the bucket is still nearly empty"
    );
}

#[tokio::test]
async fn a_rule_added_back_under_its_name_with_another_key_source_starts_fresh() {
    // Keyed on the client: without an `X-Client-Id`, its address (`ip:10.0.0.1`).
    let by_client = vec![rule("extra", KeySource::ClientId, 60_000, 1)];
    let engine = engine_with_denial_cache(Algorithm::SlidingWindow, by_client, 0).await;
    let by_address = Caller {
        client_id: Some(ClientKey::Address),
        ..caller(1)
    };
    assert!(engine.check(&by_address).await.is_ok());
    assert!(
        engine.check(&by_address).await.is_err(),
        "the client's one call"
    );
    // Removed, and added back as a literal that spells the same value: a literal's
    // values are its own (`lit:`), so the old count is not read.
    let literal = KeySource::Literal("ip:10.0.0.1".into());
    engine.set_rules(
        Algorithm::SlidingWindow,
        vec![rule("extra", literal, 60_000, 1)],
    );
    assert!(engine.check(&caller(1)).await.is_ok(), "a fresh count");
    assert!(engine.check(&caller(1)).await.is_err());
}
