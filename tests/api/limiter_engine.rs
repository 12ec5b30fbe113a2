//! The limiter engine against real Redis: concurrency, all-or-nothing, time, TTLs.
//! A frozen app-supplied clock makes every outcome exact.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header::HeaderMap;
use seckill::domain::{ClientIp, UserId};
use seckill::http::rate_limit::RateLimitHeaders;
use seckill::limiter::policy::{KeySource, PolicyConfig, RuleConfig};
use seckill::limiter::{
    Algorithm, Caller, Clock, FailMode, Limiter, LimiterSettings, ManualClock, Rejection, Scope,
};
use seckill::metrics::{Metrics, RedisPurpose};
use seckill::store::RedisStore;

use crate::helpers::{eventually, redis_test_settings};

pub fn rule(name: &str, key: KeySource, window_ms: u64, threshold: u64) -> RuleConfig {
    RuleConfig::new(name, key, window_ms, threshold, &format!("{name} says no"))
}

pub struct Engine {
    pub limiter: Arc<Limiter>,
    pub clock: ManualClock,
    pub redis: RedisStore,
    pub metrics: Arc<Metrics>,
}

/// Limiter settings with one policy `p` and `slots` slots of denial cache.
pub fn one_policy(
    algorithm: Algorithm,
    fail_mode: FailMode,
    rules: Vec<RuleConfig>,
    slots: usize,
) -> LimiterSettings {
    let mut policies = BTreeMap::new();
    policies.insert(
        "p".to_string(),
        PolicyConfig {
            scope: Scope::Global,
            algorithm,
            fail_mode,
            enabled: true,
            rules,
        },
    );
    LimiterSettings {
        policies,
        denial_cache_slots: slots,
        ..LimiterSettings::default()
    }
}

/// A limiter with one policy `p`, its own key prefix, a frozen clock and the default
/// denial cache.
pub async fn engine(algorithm: Algorithm, rules: Vec<RuleConfig>) -> Engine {
    engine_with_denial_cache(
        algorithm,
        rules,
        LimiterSettings::default().denial_cache_slots,
    )
    .await
}

/// The same with `slots` slots of denial cache (0 = off: every decision asks Redis).
pub async fn engine_with_denial_cache(
    algorithm: Algorithm,
    rules: Vec<RuleConfig>,
    slots: usize,
) -> Engine {
    let settings = redis_test_settings();
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let redis = RedisStore::connect(
        &seckill::startup::redis_options(&settings),
        Arc::clone(&metrics),
    )
    .await
    .expect("redis");
    let limiter_settings = one_policy(algorithm, FailMode::Open, rules, slots);
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let limiter = Limiter::new(redis.clone(), &limiter_settings, Arc::clone(&metrics))
        .expect("valid policies")
        .with_clock(Clock::Manual(clock.clone()));
    Engine {
        limiter: Arc::new(limiter),
        clock,
        redis,
        metrics,
    }
}

pub fn caller(user: i64) -> Caller<'static> {
    Caller {
        user: Some(UserId::try_from(user).expect("positive")),
        ip: ClientIp::new([10, 0, 0, 1].into()),
        client_id: None,
        route: "/test".into(),
        partition: None,
    }
}

impl Engine {
    pub async fn check(
        &self,
        caller: &Caller<'_>,
    ) -> Result<seckill::limiter::Admission, Rejection> {
        self.limiter.check("p", None, caller).await
    }

    pub fn key(&self, algorithm: Algorithm, rule: &str, value: &str) -> String {
        format!("{}:{{p}}:{algorithm}:{rule}:{value}", self.redis.prefix())
    }

    /// Everything stored under `key`, as Redis would dump it, for before/after equality.
    pub async fn snapshot(&self, key: &str) -> Vec<String> {
        let kind: String = self.query(redis::cmd("TYPE").arg(key)).await;
        match kind.as_str() {
            "zset" => {
                self.query(
                    redis::cmd("ZRANGE")
                        .arg(key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES"),
                )
                .await
            }
            "hash" => {
                let mut all: Vec<String> = self.query(redis::cmd("HGETALL").arg(key)).await;
                all.sort();
                all
            }
            "none" => vec![],
            other => panic!("unexpected type {other}"),
        }
    }

    pub async fn pttl(&self, key: &str) -> i64 {
        self.query(redis::cmd("PTTL").arg(key)).await
    }

    /// When `key` expires, in Unix ms (`PEXPIRETIME`): unlike `PTTL`, it does not move
    /// with the clock, so equal values mean the expiry was not touched.
    pub async fn expire_time(&self, key: &str) -> i64 {
        self.query(redis::cmd("PEXPIRETIME").arg(key)).await
    }

    /// Puts `rules` in force for policy `p` at run time, as an admin edit does (every
    /// instance then calls `replace_policies` with the new set).
    pub fn set_rules(&self, algorithm: Algorithm, rules: Vec<RuleConfig>) {
        let settings = one_policy(algorithm, FailMode::Open, rules, 0);
        let set = seckill::limiter::PolicySet::parse(&settings.policies).expect("valid rules");
        self.limiter.replace_policies(set);
    }

    /// Returns once `ms` of Redis's own time have passed (a marker key set to expire in
    /// `ms` is gone): every key whose TTL was at most `ms` when this was called has
    /// expired too. Keys expire by Redis's clock, which the manual clock does not move.
    pub async fn redis_time_passes(&self, ms: u64) {
        let marker = format!("{}:marker:{}", self.redis.prefix(), uuid::Uuid::new_v4());
        let _: () = self
            .query(redis::cmd("SET").arg(&marker).arg(1).arg("PX").arg(ms))
            .await;
        eventually(
            "the marker key expires",
            Duration::from_millis(ms) + Duration::from_secs(10),
            || async { (self.pttl(&marker).await == -2).then_some(()) },
        )
        .await;
    }

    /// `DUMP` of `key`: its exact serialized value, `None` when it does not exist.
    pub async fn dump(&self, key: &str) -> Option<Vec<u8>> {
        self.query(redis::cmd("DUMP").arg(key)).await
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        self.redis
            .call(RedisPurpose::Other, cmd)
            .await
            .expect("redis answers")
    }

    pub fn counter(&self, name: &str, labels: &[&str]) -> u64 {
        match name {
            "fail_open" => self
                .metrics
                .limiter_fail_open
                .with_label_values(labels)
                .get(),
            "decisions" => self
                .metrics
                .limiter_decisions
                .with_label_values(labels)
                .get(),
            _ => unreachable!(),
        }
    }
}

fn refused(
    result: Result<seckill::limiter::Admission, Rejection>,
) -> Box<seckill::limiter::Refusal> {
    match result {
        Err(Rejection::Refused(refusal)) => refusal,
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("expected a refusal, got an admission"),
    }
}

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
        engine.key(algorithm, "second", "shared"),
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
    let keys = [
        engine.key(algorithm, "first", "1"),
        engine.key(algorithm, "second", "shared"),
        engine.key(algorithm, "third", "1"),
    ];
    let mut before = Vec::new();
    for key in &keys {
        before.push((engine.dump(key).await, engine.expire_time(key).await));
    }
    assert!(before.iter().all(|(dump, at)| dump.is_some() && *at > 0));
    for _ in 0..3 {
        engine.clock.advance_ms(3);
        let refusal = refused(engine.check(&caller(1)).await);
        assert!(!refusal.local, "asked of Redis");
        assert_eq!(refusal.dimension(), "second");
    }
    for (key, before) in keys.iter().zip(before) {
        let after = (engine.dump(key).await, engine.expire_time(key).await);
        assert_eq!(after, before, "{key} changed");
    }
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

/// Counts WARN events on the thread it is installed on.
struct CountWarnings(Arc<std::sync::atomic::AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// While Redis is down every request of a fail-closed policy fails, and the log says so
/// once per burst, not once per request (which would bury the log when it matters).
#[tokio::test]
async fn a_redis_outage_is_logged_once_per_burst_when_failing_closed() {
    use tracing_subscriber::layer::SubscriberExt;

    let mut redis = crate::helpers::OwnRedis::start().await;
    let mut settings = redis_test_settings();
    crate::helpers::use_own_redis(&mut settings, redis.url());
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let store = RedisStore::connect(
        &seckill::startup::redis_options(&settings),
        Arc::clone(&metrics),
    )
    .await
    .expect("redis");
    let limiter = Limiter::new(
        store,
        &one_policy(
            Algorithm::SlidingWindow,
            FailMode::Closed,
            vec![rule("only", KeySource::User, 60_000, 10)],
            0,
        ),
        metrics,
    )
    .expect("valid policies");
    assert!(limiter.check("p", None, &caller(1)).await.is_ok());

    redis.stop();
    let warnings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let subscriber = tracing_subscriber::registry().with(CountWarnings(Arc::clone(&warnings)));
    let _on_this_thread = tracing::subscriber::set_default(subscriber);
    for user in 1..=50 {
        assert!(matches!(
            limiter.check("p", None, &caller(user)).await,
            Err(Rejection::Unavailable)
        ));
    }
    assert_eq!(
        warnings.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one warning for a burst of 50 failures"
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
