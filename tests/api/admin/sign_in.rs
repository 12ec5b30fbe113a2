//! The admin token and the sign-in lockout: every admin path asks for the token first,
//! and an address that sends wrong tokens is locked out, with Redis or without it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use seckill::domain::ClientIp;
use seckill::identity::lockout::{LockoutLimits, Reservation, SignInLockout};
use seckill::identity::{AdminGuard, AdminTokens, SignInError};
use seckill::limiter::{Clock, FailMode, Limiter, LimiterSettings};
use seckill::metrics::Metrics;
use seckill::store::RedisStore;
use secrecy::SecretString;
use sqlx::PgPool;

use seckill_test_support::{
    eventually, json, redis_connection, redis_test_settings, spawn_app, spawn_app_from,
    spawn_app_with, use_own_redis, OwnRedis, TestApp, ADMIN_TOKEN,
};

/// Admin tokens compared so far: every comparison is a guess someone got to make.
async fn token_comparisons(app: &TestApp) -> f64 {
    app.metric_sum("seckill_admin_token_comparisons_total")
        .await
}

/// Each attempt takes its place in the count before its token is compared, so a burst
/// cannot slip guesses in between the lockout check and the failure count: 200 wrong
/// tokens at once get exactly the 10 guesses the `admin_auth` policy allows.
#[sqlx::test]
async fn a_burst_of_wrong_admin_tokens_gets_ten_guesses_and_locks_the_address(db: PgPool) {
    let app = spawn_app(&db).await;
    let ip = "10.54.0.1";
    let guesses: Vec<String> = (0..200).map(|i| format!("guess-{i}")).collect();
    let responses =
        futures_util::future::join_all(guesses.iter().map(|guess| app.sign_in(ip, guess))).await;
    let count = |status: u16| responses.iter().filter(|r| r.status() == status).count();
    assert_eq!(
        (token_comparisons(&app).await, count(401), count(429)),
        (10.0, 10, 190),
        "(tokens compared, 401s, 429s)"
    );

    // The right token is refused too, without being compared, for the policy's whole
    // window (5 minutes).
    let locked = app.sign_in(ip, ADMIN_TOKEN).await;
    assert_eq!(locked.status(), 429);
    let body = json(locked).await;
    assert_eq!(body["code"], "RATE_LIMITED");
    let wait = body["retryAfterMs"].as_u64().unwrap();
    assert!((240_000..=300_000).contains(&wait), "retryAfterMs {wait}");
    assert_eq!(token_comparisons(&app).await, 10.0);

    // When the lockout expires (brought forward here), the right token is let in.
    let failures = format!(
        "{}:{{admin-auth:{ip}}}:failures",
        app.settings.redis_key_prefix
    );
    let mut redis = app.redis().await;
    let expiring: i64 = redis::cmd("PEXPIRE")
        .arg(&failures)
        .arg(1)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(expiring, 1, "the lockout is kept in {failures}");
    eventually("the lockout expires", Duration::from_secs(10), || async {
        let response = app.sign_in(ip, ADMIN_TOKEN).await;
        match response.status().as_u16() {
            200 => Some(()),
            429 => None,
            other => panic!("while locked: {other}"),
        }
    })
    .await;
}

/// A right token gives its place back, so using the dashboard never counts towards the
/// lockout: only refused tokens do.
#[sqlx::test]
async fn right_tokens_never_count_towards_the_lockout(db: PgPool) {
    let app = spawn_app(&db).await;
    let ip = "10.55.0.1";
    for i in 0..50 {
        assert_eq!(
            app.sign_in(ip, ADMIN_TOKEN).await.status(),
            200,
            "right {i}"
        );
    }
    for i in 0..9 {
        assert_eq!(app.sign_in(ip, "guess").await.status(), 401, "wrong {i}");
    }
    assert_eq!(app.sign_in(ip, ADMIN_TOKEN).await.status(), 200);
    // The tenth refused token is the last one compared.
    assert_eq!(app.sign_in(ip, "guess").await.status(), 401);
    assert_eq!(app.sign_in(ip, ADMIN_TOKEN).await.status(), 429);
}

#[sqlx::test]
async fn every_admin_path_needs_the_token_first(db: PgPool) {
    let app = spawn_app(&db).await;
    for path in [
        "/admin/api/orders",
        "/admin/api/policies",
        "/admin/api/no-such-thing",
    ] {
        assert_eq!(app.get(path).await.status(), 401, "{path}");
    }
    assert_eq!(
        app.admin_get("/admin/api/no-such-thing").await.status(),
        404
    );
}

/// The lockout script alone: a place whose attempt never settles (its process died
/// between reserve and settle) counts until its lease ends, then frees itself; every
/// key it writes expires.
#[tokio::test]
async fn a_sign_in_place_never_settled_is_freed_when_its_lease_ends() {
    let settings = redis_test_settings();
    let metrics = Arc::new(Metrics::new().unwrap());
    let redis = RedisStore::connect(&seckill::startup::redis_options(&settings), metrics)
        .await
        .unwrap();
    let lease = Duration::from_millis(300);
    let lockout = SignInLockout::new(redis, Clock::Redis, lease);
    let limits = LockoutLimits {
        failures: 3,
        window_ms: 60_000,
    };
    let ip = ClientIp::new("10.56.0.1".parse().unwrap());
    let reserve = || async {
        match lockout.reserve(ip, limits).await.unwrap() {
            Reservation::Granted(attempt) => Ok(attempt),
            Reservation::Refused { retry_after_ms } => Err(retry_after_ms),
        }
    };

    let failed = reserve().await.unwrap();
    let failed = lockout.fail(failed, limits).await.unwrap();
    assert_eq!(failed.failures, 1);
    let released = reserve().await.unwrap();
    let _lost = reserve().await.unwrap();
    // One failure and two attempts in flight: the limit.
    let refused = reserve().await.unwrap_err();
    assert!((1..=300).contains(&refused), "retry after {refused} ms");
    // A right token's place comes back at once; a place never settled does not.
    lockout.release(released, limits).await.unwrap();
    let _lost_too = reserve().await.unwrap();
    assert!(reserve().await.is_err());

    let keys = format!("{}:{{admin-auth:10.56.0.1}}", settings.redis_key_prefix);
    let mut conn = redis_connection(&settings).await;
    for (key, most) in [("failures", 60_000), ("in-flight", 300)] {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(format!("{keys}:{key}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!((1..=most).contains(&ttl), "{key} expires in {ttl} ms");
    }

    let (attempt, _) = eventually(
        "the lost places are freed",
        Duration::from_secs(10),
        || async { reserve().await.ok() },
    )
    .await;
    let failed = lockout.fail(attempt, limits).await.unwrap();
    assert_eq!(failed.failures, 2);
}

/// Without Redis the `admin_auth` policy's fail mode decides, as for any policy: open
/// compares the token without a place, so the right one still gets in.
#[sqlx::test]
async fn without_redis_admin_tokens_are_compared_without_the_lockout(db: PgPool) {
    let mut redis = OwnRedis::start().await;
    let app = spawn_app_with(&db, |s| {
        use_own_redis(s, redis.url());
        s.limiter.policies.get_mut("admin_auth").unwrap().fail_mode = FailMode::Open;
    })
    .await;
    redis.stop();
    assert_eq!(app.sign_in("10.57.0.1", "guess").await.status(), 401);
    assert_eq!(app.sign_in("10.57.0.1", ADMIN_TOKEN).await.status(), 200);
    assert_eq!(
        app.metric_sum(r#"seckill_limiter_fail_open_total{policy="admin_auth"}"#)
            .await,
        2.0
    );
}

/// A limiter without the `admin_auth` policy (the app seeds it from its defaults, so only
/// a stored row deleted by hand gets here) still gets the lockout, failing `local` like
/// the default policy: without Redis an address gets the default 10 guesses, counted in
/// process, and then not even the right token gets in. (Issue 34: it failed open, and
/// compared every guess.)
#[tokio::test]
async fn without_redis_a_missing_admin_auth_policy_fails_local() {
    let mut own = OwnRedis::start().await;
    let mut settings = redis_test_settings();
    use_own_redis(&mut settings, own.url());
    let metrics = Arc::new(Metrics::new().unwrap());
    let redis = RedisStore::connect(
        &seckill::startup::redis_options(&settings),
        Arc::clone(&metrics),
    )
    .await
    .unwrap();
    let no_policies = LimiterSettings::default();
    let limiter = Limiter::new(redis.clone(), &no_policies, Arc::clone(&metrics)).unwrap();
    assert!(limiter.policy("admin_auth").is_none());
    let guard = AdminGuard::new(
        AdminTokens::parse(&SecretString::from(ADMIN_TOKEN)),
        Arc::new(limiter),
        SignInLockout::new(redis, Clock::Redis, AdminGuard::ATTEMPT_LEASE),
        &metrics,
    );
    own.stop();
    let ip = ClientIp::new("10.57.1.1".parse().unwrap());
    let mut answers = Vec::new();
    for _ in 0..10 {
        answers.push(guard.authenticate(ip, Some("guess")).await.unwrap_err());
    }
    assert_eq!(answers, [SignInError::Refused; 10]);
    let locked = guard.authenticate(ip, Some(ADMIN_TOKEN)).await.unwrap_err();
    assert!(
        matches!(locked, SignInError::Locked { retry_after_ms } if retry_after_ms > 0),
        "{locked:?}"
    );
}

/// With `local` (the default) the lockout holds without Redis: each of two instances
/// counts refused tokens per address in process, at its share of the threshold (4 over
/// 2: 2 each), so the fleet compares 4 wrong tokens from one address, as with Redis.
/// A right token gives its place back there too.
#[sqlx::test]
async fn without_redis_the_lockout_holds_in_process_at_each_instances_share(db: PgPool) {
    let mut redis = OwnRedis::start().await;
    let first = spawn_app_with(&db, |s| {
        use_own_redis(s, redis.url());
        s.limiter.heartbeat_ms = 50;
        s.limiter.policies.get_mut("admin_auth").unwrap().rules[0].threshold = 4;
    })
    .await;
    let second = spawn_app_from(first.settings.clone()).await;
    for app in [&first, &second] {
        eventually(
            "two instances share the limits",
            Duration::from_secs(5),
            || async { (app.metric_sum("seckill_limiter_instances").await == 2.0).then_some(()) },
        )
        .await;
    }
    redis.stop();
    for app in [&first, &second] {
        for _ in 0..2 {
            assert_eq!(app.sign_in("10.58.0.1", "guess").await.status(), 401);
        }
        let locked = app.sign_in("10.58.0.1", ADMIN_TOKEN).await;
        assert_eq!(locked.status(), 429, "locked out, right token or not");
        assert_eq!(json(locked).await["code"], "RATE_LIMITED");
    }
    assert_eq!(token_comparisons(&first).await, 2.0);
    assert_eq!(token_comparisons(&second).await, 2.0);
    // Right tokens never count: another address signs in, then still has its 2 guesses.
    for _ in 0..3 {
        assert_eq!(first.sign_in("10.58.0.2", ADMIN_TOKEN).await.status(), 200);
    }
    for expected in [401, 401, 429] {
        assert_eq!(first.sign_in("10.58.0.2", "guess").await.status(), expected);
    }
    assert_eq!(
        first
            .metric_sum(r#"seckill_limiter_mode{mode="local",policy="admin_auth"}"#)
            .await,
        1.0
    );
}

/// The lockout's counts made in process live in a table of their own (issue 33): while
/// Redis is away, a flood of `/api/limited` with a fresh `X-Client-Id` each, six times
/// past the tables' bound, leaves every locked address locked. With one table for every
/// policy, evicting an arbitrary key when full, only 5, 6 and 8 of the 20 were still
/// locked after the flood (three runs): the others could guess again.
#[sqlx::test]
async fn without_redis_a_flood_of_fresh_client_ids_leaves_every_locked_address_locked(db: PgPool) {
    const ADDRESSES: usize = 20;
    const FLOOD: usize = 300;
    let mut redis = OwnRedis::start().await;
    let app = spawn_app_with(&db, |s| {
        use_own_redis(s, redis.url());
        s.limiter.fallback_keys = 50;
        s.limiter.policies.get_mut("admin_auth").unwrap().rules[0].threshold = 2;
    })
    .await;
    redis.stop();
    let ip = |n: usize| format!("10.59.0.{n}");
    for n in 0..ADDRESSES {
        for expected in [401, 401, 429] {
            assert_eq!(app.sign_in(&ip(n), "guess").await.status(), expected, "{n}");
        }
    }
    let flood: Vec<u16> = futures_util::stream::iter(0..FLOOD)
        .map(|n| {
            let app = &app;
            async move {
                app.limited("", &format!("flood-{n}"))
                    .await
                    .status()
                    .as_u16()
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert_eq!(flood.iter().filter(|&&s| s == 200).count(), FLOOD);
    let mut locked = 0;
    for n in 0..ADDRESSES {
        if app.sign_in(&ip(n), ADMIN_TOKEN).await.status() == 429 {
            locked += 1;
        }
    }
    assert_eq!(
        locked, ADDRESSES,
        "locked addresses still locked after the flood"
    );
    assert_eq!(token_comparisons(&app).await, (2 * ADDRESSES) as f64);
}

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

    #[sqlx::test]
    async fn repeated_wrong_admin_tokens_lock_the_address_out(db: PgPool) {
        let app = spawn_app_with(&db, |s| {
            s.limiter.policies.get_mut("admin_auth").unwrap().rules[0].threshold = 3;
        })
        .await;
        for _ in 0..3 {
            assert_eq!(app.sign_in("10.53.0.1", "guess").await.status(), 401);
        }
        let locked = app.sign_in("10.53.0.1", "guess").await;
        assert_eq!(locked.status(), 429);
        assert!(locked.headers().contains_key("retry-after"));
        assert_eq!(json(locked).await["code"], "RATE_LIMITED");
        assert_eq!(
            app.sign_in("10.53.0.1", ADMIN_TOKEN).await.status(),
            429,
            "locked out, right token or not"
        );

        // Another address is not affected.
        let other = app.sign_in("10.53.0.2", ADMIN_TOKEN).await;
        assert_eq!(json(other).await["name"], "admin");
    }
}
