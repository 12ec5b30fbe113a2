//! The limiter at the HTTP edge: `/api/limited`, its headers, several instances, Redis
//! outages and whose `X-Forwarded-For` is believed.

use std::time::Duration;

use futures_util::StreamExt;
use seckill::limiter::{Algorithm, FailMode};
use serde_json::Value;
use sqlx::PgPool;

use seckill_test_support::{
    eventually, json, spawn_app_from, spawn_app_with, test_settings, use_own_redis, OwnRedis,
};

fn header(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

#[sqlx::test]
async fn a_client_gets_one_hundred_per_minute_then_a_429_with_every_header(db: PgPool) {
    let app = spawn_app_with(&db, |_| {}).await;

    let first = app.limited("", "alice").await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "x-ratelimit-remaining").as_deref(),
        Some("99")
    );
    assert_eq!(
        header(&first, "x-ratelimit-policy").as_deref(),
        Some("sliding_window")
    );
    assert_eq!(
        header(&first, "ratelimit-policy").as_deref(),
        Some(r#""client";q=100;w=60, "ip";q=1000;w=60, "network";q=10000;w=60"#)
    );
    assert_eq!(
        header(&first, "ratelimit").as_deref(),
        Some(r#""client";r=99"#)
    );
    for _ in 1..100 {
        assert_eq!(app.limited("", "alice").await.status(), 200);
    }

    let refused = app.limited("", "alice").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(
        header(&refused, "x-ratelimit-remaining").as_deref(),
        Some("0")
    );
    assert_eq!(
        header(&refused, "x-ratelimit-policy").as_deref(),
        Some("sliding_window")
    );
    let wait: u64 = header(&refused, "retry-after-ms").unwrap().parse().unwrap();
    assert!(wait > 0 && wait <= 60_000, "{wait}");
    assert_eq!(
        header(&refused, "retry-after").unwrap(),
        wait.div_ceil(1000).to_string()
    );
    assert_eq!(
        header(&refused, "ratelimit").unwrap(),
        format!(r#""client";r=0;t={}"#, wait.div_ceil(1000))
    );
    let body = json(refused).await;
    assert_eq!(body["code"], "RATE_LIMITED");
    assert_eq!(body["dimension"], "client");
    assert_eq!(body["message"], "Rate limit exceeded, slow down");
    assert_eq!(body["retryAfterMs"], wait);

    // Another client id is another quota.
    assert_eq!(app.limited("", "bob").await.status(), 200);
    assert_eq!(app.metric_sum(r#"seckill_limiter_decisions_total{dimension="client",outcome="reject",policy="limited"}"#).await, 1.0);
}

#[sqlx::test]
async fn the_leaky_bucket_holds_each_answer_for_its_slot_and_refuses_past_the_longest_wait(
    db: PgPool,
) {
    let app = spawn_app_with(&db, |s| {
        let rule = &mut s.limiter.policies.get_mut("limited").unwrap().rules[0];
        // A slot every 100 ms, held at most 500 ms: six slots from now.
        (rule.window_ms, rule.threshold, rule.max_delay_ms) = (1_000, 10, Some(500));
    })
    .await;
    let calls = (0..10).map(|_| async {
        let sent = std::time::Instant::now();
        let response = app.limited("?policy=leaky_bucket", "dora").await;
        (
            response.status().as_u16(),
            header(&response, "ratelimit-delay-ms"),
            sent.elapsed(),
        )
    });
    let answers = futures_util::future::join_all(calls).await;
    let mut delays = Vec::new();
    for (status, delay, took) in &answers {
        match status {
            200 => {
                let delay: u64 = delay.as_deref().unwrap_or("0").parse().unwrap();
                assert!(delay <= 500, "{answers:?}");
                // Held for its slot: never answered before it (to the millisecond the
                // wait is counted from).
                assert!(took.as_millis() + 1 >= u128::from(delay), "{answers:?}");
                delays.push(delay);
            }
            429 => assert!(delay.is_none()),
            other => panic!("{other}: {answers:?}"),
        }
    }
    delays.sort();
    // Six slots within 500 ms of the first call, one more for every 100 ms the calls
    // took to arrive; each admitted call waited for its own.
    assert!((6..=8).contains(&delays.len()), "{answers:?}");
    assert_eq!(delays[0], 0, "the first slot is free");
    assert!(
        delays.windows(2).all(|pair| pair[0] < pair[1]),
        "one call per slot: {delays:?}"
    );
}

#[sqlx::test]
async fn an_unknown_policy_or_a_bad_client_id_is_a_validation_error(db: PgPool) {
    let app = spawn_app_with(&db, |_| {}).await;
    let response = app.limited("?policy=moving_window", "dave").await;
    assert_eq!(response.status(), 400);
    let body = json(response).await;
    assert_eq!(body["code"], "VALIDATION_FAILED");
    assert_eq!(body["field"], "policy");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("sliding_window") && message.contains("token_bucket"),
        "{message}"
    );

    for bad in ["has space", "brace{tag}", &"x".repeat(65)] {
        let response = app.limited("", bad).await;
        assert_eq!(response.status(), 400, "{bad}");
        assert_eq!(json(response).await["field"], "X-Client-Id");
    }
}

/// Takes the app's own Redis away, checks three answers and the matching counter, brings
/// Redis back and waits for decisions to resume. One app per test: the rules live in the
/// test's database, so a second app there would share them.
async fn through_a_redis_outage(
    db: &PgPool,
    fail_mode: FailMode,
) -> Vec<(u16, Option<String>, Option<String>)> {
    let mut redis = OwnRedis::start().await;
    let mut settings = test_settings(db);
    use_own_redis(&mut settings, redis.url());
    settings
        .limiter
        .policies
        .get_mut("limited")
        .unwrap()
        .fail_mode = fail_mode;
    let app = spawn_app_from(settings).await;
    assert_eq!(app.limited("", "frank").await.status(), 200);

    redis.stop();
    // The client's own timeout turns a hang into a failed test instead of a stuck one.
    let patient = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let response = patient
            .get(app.url("/api/limited"))
            .send()
            .await
            .expect("an answer, not a hang");
        println!(
            "{fail_mode:?} answer without redis took {:?}",
            started.elapsed()
        );
        let status = response.status().as_u16();
        let remaining = header(&response, "x-ratelimit-remaining");
        let code = json(response).await["code"].as_str().map(str::to_string);
        answers.push((status, remaining, code));
    }
    let (counter, count) = match fail_mode {
        FailMode::Open => (r#"seckill_limiter_fail_open_total{policy="limited"}"#, 3.0),
        FailMode::Closed => (
            r#"seckill_limiter_fail_closed_total{policy="limited"}"#,
            3.0,
        ),
        FailMode::Local => (
            r#"seckill_limiter_mode{mode="local",policy="limited"}"#,
            1.0,
        ),
    };
    assert_eq!(app.metric_sum(counter).await, count, "{counter}");

    redis.restart().await;
    eventually(
        "the route decides again",
        Duration::from_secs(10),
        || async {
            let response = app.limited("", "frank").await;
            (response.status() == 200).then_some(())?;
            header(&response, "x-ratelimit-remaining")
        },
    )
    .await;
    answers
}

#[sqlx::test]
async fn without_redis_a_fail_open_route_admits_and_recovers(db: PgPool) {
    let answers = through_a_redis_outage(&db, FailMode::Open).await;
    // Admitted, but with no quota to report: nothing was decided.
    assert_eq!(answers, vec![(200, None, None); 3]);
}

/// `local` (the default) keeps counting in process: alone, this instance's share is
/// the whole threshold (100), and the quota headers count it down.
#[sqlx::test]
async fn without_redis_a_local_route_keeps_limiting_and_recovers(db: PgPool) {
    let answers = through_a_redis_outage(&db, FailMode::Local).await;
    let remaining = |n: &str| (200, Some(n.to_string()), None);
    assert_eq!(
        answers,
        vec![remaining("99"), remaining("98"), remaining("97")]
    );
}

#[sqlx::test]
async fn without_redis_a_fail_closed_route_refuses_and_recovers(db: PgPool) {
    let answers = through_a_redis_outage(&db, FailMode::Closed).await;
    assert_eq!(
        answers,
        vec![(503, None, Some("LIMITER_UNAVAILABLE".to_string())); 3]
    );
}

/// An HTTP client connecting from `ip` (a loopback address other than 127.0.0.1 is an
/// untrusted peer).
fn client_from(ip: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(ip))
        .build()
        .expect("a client")
}

#[sqlx::test]
async fn forwarded_for_counts_only_from_a_trusted_proxy(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        s.limiter.policies.get_mut("limited").unwrap().rules[0].threshold = 3;
    })
    .await;

    // 127.0.0.2 is not a trusted proxy: its X-Forwarded-For is ignored, so every request
    // counts against 127.0.0.2 itself whatever address it claims.
    let untrusted = client_from([127, 0, 0, 2]);
    for i in 0..4 {
        let response = untrusted
            .get(app.url("/api/limited"))
            .header("X-Forwarded-For", format!("10.9.0.{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            if i < 3 { 200 } else { 429 },
            "request {i}"
        );
    }

    // 127.0.0.1 is trusted: each forwarded address gets its own quota.
    let trusted = client_from([127, 0, 0, 1]);
    for i in 0..6 {
        let response = trusted
            .get(app.url("/api/limited"))
            .header("X-Forwarded-For", format!("10.8.0.{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "request {i}");
    }
}

#[sqlx::test]
async fn client_id_counts_only_from_a_trusted_proxy(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        s.limiter.policies.get_mut("limited").unwrap().rules[0].threshold = 3;
    })
    .await;

    // 127.0.0.2 is not a trusted proxy: a fresh X-Client-Id each time buys nothing, the
    // address is the key, and no key is made per claimed id.
    let untrusted = client_from([127, 0, 0, 2]);
    for i in 0..5 {
        let response = untrusted
            .get(app.url("/api/limited"))
            .header("X-Client-Id", format!("fresh-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            if i < 3 { 200 } else { 429 },
            "request {i}"
        );
    }
    let mut redis = app.redis().await;
    let pattern = format!("{}:{{limited}}:*", app.settings.redis_key_prefix);
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(&mut redis)
        .await
        .unwrap();
    keys.sort();
    let key = |rest: &str| {
        format!(
            "{}:{{limited}}:sliding_window:{rest}",
            app.settings.redis_key_prefix
        )
    };
    // The address's own key and its network's (the per-address and per-network rules).
    assert_eq!(
        keys,
        [
            key("client:ip:127.0.0.2"),
            key("ip:127.0.0.2"),
            key("network:net:127.0.0.0/24"),
        ]
    );

    // 127.0.0.1 is trusted: each client id gets its own quota.
    let trusted = client_from([127, 0, 0, 1]);
    for i in 0..6 {
        let response = trusted
            .get(app.url("/api/limited"))
            .header("X-Client-Id", format!("own-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "request {i}");
    }
}

/// The keys one address can make on `/api/limited` are bounded (issue 33): its `ip`
/// rule, decided in the same script call as the client's, refuses past its threshold and
/// then writes nothing, so 60 fresh client ids from one address make 20 client keys, the
/// address's and its network's, all expiring within the window. Before the rule, the 60
/// made 60 keys (and a steady flood about 250 000 per address).
#[sqlx::test]
async fn one_address_with_fresh_client_ids_makes_at_most_its_share_of_keys(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        let limited = s.limiter.policies.get_mut("limited").unwrap();
        let ip = limited.rules.iter_mut().find(|r| r.name == "ip");
        ip.expect("limited has an ip rule").threshold = 20;
    })
    .await;
    let answers: Vec<(u16, Value)> = futures_util::stream::iter(0..60)
        .map(|n| {
            let app = &app;
            async move {
                let response = app.limited("", &format!("fresh-{n}")).await;
                let status = response.status().as_u16();
                (status, json(response).await)
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert_eq!(answers.iter().filter(|(s, _)| *s == 200).count(), 20);
    let refused: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 429)
        .map(|(_, body)| body)
        .collect();
    assert_eq!(refused.len(), 40);
    assert!(refused.iter().all(|body| body["dimension"] == "ip"));
    let prefix = &app.settings.redis_key_prefix;
    let mut keys = app.keys_matching(&format!("{prefix}:{{limited}}:*")).await;
    keys.sort();
    assert_eq!(keys.len(), 22, "{keys:?}");
    let own = |rest: &str| format!("{prefix}:{{limited}}:sliding_window:{rest}");
    assert!(keys.contains(&own("ip:127.0.0.1")), "{keys:?}");
    assert!(keys.contains(&own("network:net:127.0.0.0/24")), "{keys:?}");
    for key in &keys {
        let ttl: i64 = app.redis_command("PTTL", key).await;
        assert!((1..=60_000).contains(&ttl), "{key} expires: {ttl}");
    }
    // Another address has its own count.
    let other = app
        .client
        .get(app.url("/api/limited"))
        .header("X-Client-Id", "fresh-elsewhere")
        .header("X-Forwarded-For", "10.61.0.1")
        .send()
        .await
        .expect("request sent");
    assert_eq!(other.status(), 200);
}

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass").
mod topology {
    use super::*;

    #[sqlx::test]
    async fn each_algorithm_is_offered_by_name_and_keeps_its_own_quota(db: PgPool) {
        let app = spawn_app_with(&db, |s| {
            s.limiter.policies.get_mut("limited").unwrap().rules[0].threshold = 3;
        })
        .await;
        // One client spends every algorithm's quota in turn: each is its own.
        for algorithm in Algorithm::ALL {
            let query = format!("?policy={algorithm}");
            // The shaper: 3 per 60 s is a slot every 20 s, and the default longest wait is
            // 1 s, so only the free slot admits.
            let admitted = if algorithm == Algorithm::LeakyBucket {
                1
            } else {
                3
            };
            for call in 0..admitted {
                let response = app.limited(&query, "carol").await;
                assert_eq!(response.status(), 200, "{algorithm} call {call}");
                assert_eq!(
                    header(&response, "x-ratelimit-policy").as_deref(),
                    Some(algorithm.as_str())
                );
                assert_eq!(
                    header(&response, "ratelimit-policy").as_deref(),
                    Some(r#""client";q=3;w=60, "ip";q=1000;w=60, "network";q=10000;w=60"#),
                    "{algorithm}"
                );
                assert_eq!(
                    header(&response, "x-ratelimit-remaining"),
                    Some((admitted - 1 - call).to_string()),
                    "{algorithm} call {call}"
                );
            }
            let refused = app.limited(&query, "carol").await;
            assert_eq!(refused.status(), 429, "{algorithm}");
            let wait: u64 = header(&refused, "retry-after-ms").unwrap().parse().unwrap();
            // At most a window, but for the weighted counter: full in its current (aligned)
            // window, it waits for the next one and then for the previous window's weight
            // to fall, up to two windows (68 726 ms seen when the three calls came early in
            // their window).
            let longest = match algorithm {
                Algorithm::SlidingWindowCounter => 120_000,
                _ => 60_000,
            };
            assert!(wait > 0 && wait <= longest, "{algorithm}: {wait}");
            let body = json(refused).await;
            assert_eq!(body["code"], "RATE_LIMITED", "{algorithm}");
        }
    }

    #[sqlx::test]
    async fn two_instances_share_one_quota(db: PgPool) {
        let first = spawn_app_with(&db, |_| {}).await;
        let second = spawn_app_from(first.settings.clone()).await;
        for i in 0..100 {
            let app = if i % 2 == 0 { &first } else { &second };
            assert_eq!(app.limited("", "erin").await.status(), 200, "request {i}");
        }
        assert_eq!(first.limited("", "erin").await.status(), 429);
        assert_eq!(second.limited("", "erin").await.status(), 429);
    }
}
