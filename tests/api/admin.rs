//! The operators' API: rules changed at runtime on every instance, audited and
//! validated; pausing sales; searching orders; live counters over all instances; the
//! sign-in lockout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use seckill::domain::ClientIp;
use seckill::identity::lockout::{LockoutLimits, Reservation, SignInLockout};
use seckill::limiter::{Clock, FailMode};
use seckill::metrics::Metrics;
use seckill::store::RedisStore;
use serde_json::json;
use sqlx::PgPool;

use crate::helpers::{
    admin_get, eventually, json, redis_connection, redis_test_settings, spawn_app, spawn_app_from,
    spawn_app_with, use_own_redis, OwnRedis, TestApp, ADMIN_TOKEN,
};

async fn admin_send(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    body: serde_json::Value,
) -> reqwest::Response {
    app.client
        .request(method, app.url(path))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn put_policy(app: &TestApp, name: &str, body: serde_json::Value) -> reqwest::Response {
    admin_send(
        app,
        reqwest::Method::PUT,
        &format!("/admin/api/policies/{name}"),
        body,
    )
    .await
}

/// One policy as `GET /admin/api/policies` lists it.
async fn stored_policy(app: &TestApp, name: &str) -> serde_json::Value {
    let policies = json(admin_get(app, "/admin/api/policies").await).await;
    policies["policies"]
        .as_array()
        .expect("a list of policies")
        .iter()
        .find(|p| p["name"] == name)
        .expect("the policy is listed")
        .clone()
}

#[sqlx::test]
async fn a_rule_changed_through_one_instance_is_in_force_on_the_other(db: PgPool) {
    let first = spawn_app(&db).await;
    let second = spawn_app_from(first.settings.clone()).await;

    let changed = put_policy(
        &first,
        "limited",
        json!({ "rules": [{ "name": "client", "threshold": 7 }] }),
    )
    .await;
    assert_eq!(changed.status(), 200);
    let changed_at = Instant::now();
    let body = json(changed).await;
    assert_eq!(body["rules"][0]["threshold"], 7);

    // Each probe is a fresh client, so probing spends no one's quota.
    let mut probe = 0;
    let (_, lag) = eventually(
        "the other instance applies the rule",
        Duration::from_secs(10),
        || {
            probe += 1;
            let id = format!("probe-{probe}");
            let second = &second;
            async move {
                let response = second
                    .client
                    .get(second.url("/api/limited"))
                    .header("X-Client-Id", id)
                    .send()
                    .await
                    .ok()?;
                let policy = response
                    .headers()
                    .get("ratelimit-policy")?
                    .to_str()
                    .ok()?
                    .to_string();
                (policy == r#""client";q=7;w=60"#).then_some(())
            }
        },
    )
    .await;
    println!(
        "rule change in force on the other instance after {:?} (polled every 50 ms)",
        changed_at.elapsed().min(lag)
    );

    // ... and it holds there: the 8th request of one client is refused.
    for i in 0..8 {
        let response = second
            .client
            .get(second.url("/api/limited"))
            .header("X-Client-Id", "holder")
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            if i < 7 { 200 } else { 429 },
            "request {i}"
        );
    }

    let audit = json(admin_get(&second, "/admin/api/audit?policy=limited").await).await;
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["changedBy"], "admin");
    assert_eq!(entries[0]["old"]["rules"][0]["threshold"], 100);
    assert_eq!(entries[0]["new"]["rules"][0]["threshold"], 7);
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM limiter_policy_audit WHERE policy = 'limited'")
            .fetch_one(&db)
            .await
            .unwrap();
    assert_eq!(rows, 1);
}

#[sqlx::test]
async fn invalid_rules_are_refused_and_change_nothing(db: PgPool) {
    let app = spawn_app(&db).await;
    let cases = [
        (
            json!({ "rules": [{ "name": "user", "windowMs": 0 }] }),
            "windowMs",
            "windowMs must be a whole number, 1 or more",
        ),
        (
            json!({ "rules": [{ "name": "user", "threshold": 0 }] }),
            "threshold",
            "threshold must be a whole number, 1 or more",
        ),
        (
            json!({ "rules": [{ "name": "user", "windowMs": -5 }] }),
            "rules[0].windowMs",
            "",
        ),
        (
            json!({ "rules": [{ "name": "nobody", "threshold": 2 }] }),
            "rules[0].name",
            "no rule",
        ),
        (
            json!({ "rules": [{ "name": "user", "message": "" }] }),
            "message",
            "message",
        ),
        (
            json!({ "algorithm": "moving_window", "rules": [] }),
            "algorithm",
            "",
        ),
    ];
    for (body, field, message) in cases {
        let response = put_policy(&app, "seckill", body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let error = json(response).await;
        assert_eq!(error["code"], "VALIDATION_FAILED", "{body}");
        assert_eq!(error["field"], field, "{body}");
        assert!(
            error["message"].as_str().unwrap().contains(message),
            "{error}"
        );
    }
    assert_eq!(
        put_policy(&app, "no_such_policy", json!({ "rules": [] }))
            .await
            .status(),
        404
    );

    let seckill = stored_policy(&app, "seckill").await;
    assert_eq!(
        seckill["rules"][1],
        json!({
            "name": "user", "key": "user", "windowMs": 60000, "threshold": 3, "message": "No duplicate submissions",
            "shadow": false, "maxDelayMs": 1000
        })
    );
    let audited: i64 = sqlx::query_scalar("SELECT count(*) FROM limiter_policy_audit")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(audited, 0);
}

#[sqlx::test]
async fn a_paused_sale_answers_sale_paused_until_resumed(db: PgPool) {
    let app = spawn_app(&db).await;
    let item = app.open_item(5).await;
    let token = app.token_for(71).await;

    let paused = admin_send(
        &app,
        reqwest::Method::POST,
        &format!("/admin/api/items/{item}/pause"),
        json!({}),
    )
    .await;
    assert_eq!(paused.status(), 200);
    assert_eq!(json(paused).await["paused"], true);
    let listing = json(app.get("/api/items").await).await;
    assert_eq!(listing["items"][0]["paused"], true);
    let refused = app.post_seckill(&token, item, "10.50.0.1").await;
    assert_eq!(refused.status(), 409);
    assert_eq!(json(refused).await["code"], "SALE_PAUSED");

    let resumed = admin_send(
        &app,
        reqwest::Method::POST,
        &format!("/admin/api/items/{item}/resume"),
        json!({}),
    )
    .await;
    assert_eq!(json(resumed).await["paused"], false);
    assert_eq!(
        app.post_seckill(&token, item, "10.50.0.1").await.status(),
        200
    );

    let missing = admin_send(
        &app,
        reqwest::Method::POST,
        "/admin/api/items/999999/pause",
        json!({}),
    )
    .await;
    assert_eq!(json(missing).await["code"], "ITEM_NOT_FOUND");
}

#[sqlx::test]
async fn orders_can_be_paged_and_filtered_newest_first(db: PgPool) {
    let app = spawn_app(&db).await;
    let (a, b) = (app.open_item(5).await, app.open_item(5).await);
    let mut placed = Vec::new();
    for (user, item) in [(81, a), (82, a), (81, b)] {
        let token = app.token_for(user).await;
        let order = json(
            app.post_seckill(&token, item, &format!("10.51.0.{user}"))
                .await,
        )
        .await;
        placed.push(order["orderId"].as_str().unwrap().to_string());
    }

    let all = json(admin_get(&app, "/admin/api/orders").await).await;
    assert_eq!(all["total"], 3);
    let ids: Vec<&str> = all["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["orderId"].as_str().unwrap())
        .collect();
    let newest_first: Vec<&str> = placed.iter().rev().map(String::as_str).collect();
    assert_eq!(ids, newest_first);

    assert_eq!(
        json(admin_get(&app, &format!("/admin/api/orders?item={a}")).await).await["total"],
        2
    );
    assert_eq!(
        json(admin_get(&app, "/admin/api/orders?user=81").await).await["total"],
        2
    );
    let page = json(admin_get(&app, "/admin/api/orders?perPage=1&page=2").await).await;
    assert_eq!(
        (
            page["total"].as_i64(),
            page["orders"].as_array().unwrap().len()
        ),
        (Some(3), 1)
    );
    assert_eq!(page["orders"][0]["orderId"], placed[1].as_str());
    let future = json(admin_get(&app, "/admin/api/orders?from=2999-01-01T00:00:00Z").await).await;
    assert_eq!(future["total"], 0);

    let bad = admin_get(&app, "/admin/api/orders?perPage=1000").await;
    assert_eq!(bad.status(), 400);
    assert_eq!(json(bad).await["field"], "perPage");
    assert_eq!(
        admin_get(&app, "/admin/api/orders?from=yesterday")
            .await
            .status(),
        400
    );
}

#[sqlx::test]
async fn live_counters_sum_every_instance(db: PgPool) {
    let first = spawn_app(&db).await;
    let second = spawn_app_from(first.settings.clone()).await;
    let item = first.open_item(10).await;
    eventually(
        "the second instance lists the item",
        Duration::from_secs(10),
        || async {
            (json(second.get("/api/items").await).await["items"]
                .as_array()?
                .len()
                == 1)
                .then_some(())
        },
    )
    .await;
    for (app, user) in [(&first, 91), (&second, 92), (&second, 93)] {
        let token = app.token_for(user).await;
        assert_eq!(
            app.post_seckill(&token, item, &format!("10.52.0.{user}"))
                .await
                .status(),
            200
        );
    }
    let (stats, _) = eventually(
        "both instances flushed their counts",
        Duration::from_secs(10),
        || async {
            let stats = json(admin_get(&first, "/admin/api/stats?window=300").await).await;
            (stats["orders"] == 3).then_some(stats)
        },
    )
    .await;
    assert_eq!(stats["passes"]["user"], 3);
    assert_eq!(stats["rejections"]["user"], json!(null));
    assert_eq!(stats["items"][0]["remainingStock"], 7);
}

/// `GET /admin/api/me` with `token`, from `ip` (the test client is a trusted proxy).
async fn sign_in(app: &TestApp, ip: &str, token: &str) -> reqwest::Response {
    app.client
        .get(app.url("/admin/api/me"))
        .bearer_auth(token)
        .header("X-Forwarded-For", ip)
        .send()
        .await
        .unwrap()
}

/// Admin tokens compared so far: every comparison is a guess someone got to make.
async fn token_comparisons(app: &TestApp) -> f64 {
    app.metric_sum("seckill_admin_token_comparisons_total")
        .await
}

#[sqlx::test]
async fn repeated_wrong_admin_tokens_lock_the_address_out(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        s.limiter.policies.get_mut("admin_auth").unwrap().rules[0].threshold = 3;
    })
    .await;
    for _ in 0..3 {
        assert_eq!(sign_in(&app, "10.53.0.1", "guess").await.status(), 401);
    }
    let locked = sign_in(&app, "10.53.0.1", "guess").await;
    assert_eq!(locked.status(), 429);
    assert!(locked.headers().contains_key("retry-after"));
    assert_eq!(json(locked).await["code"], "RATE_LIMITED");
    assert_eq!(
        sign_in(&app, "10.53.0.1", ADMIN_TOKEN).await.status(),
        429,
        "locked out, right token or not"
    );

    // Another address is not affected.
    let other = sign_in(&app, "10.53.0.2", ADMIN_TOKEN).await;
    assert_eq!(json(other).await["name"], "admin");
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
        futures_util::future::join_all(guesses.iter().map(|guess| sign_in(&app, ip, guess))).await;
    let count = |status: u16| responses.iter().filter(|r| r.status() == status).count();
    assert_eq!(
        (token_comparisons(&app).await, count(401), count(429)),
        (10.0, 10, 190),
        "(tokens compared, 401s, 429s)"
    );

    // The right token is refused too, without being compared, for the policy's whole
    // window (5 minutes).
    let locked = sign_in(&app, ip, ADMIN_TOKEN).await;
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
        let response = sign_in(&app, ip, ADMIN_TOKEN).await;
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
            sign_in(&app, ip, ADMIN_TOKEN).await.status(),
            200,
            "right {i}"
        );
    }
    for i in 0..9 {
        assert_eq!(sign_in(&app, ip, "guess").await.status(), 401, "wrong {i}");
    }
    assert_eq!(sign_in(&app, ip, ADMIN_TOKEN).await.status(), 200);
    // The tenth refused token is the last one compared.
    assert_eq!(sign_in(&app, ip, "guess").await.status(), 401);
    assert_eq!(sign_in(&app, ip, ADMIN_TOKEN).await.status(), 429);
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
        admin_get(&app, "/admin/api/no-such-thing").await.status(),
        404
    );
}

#[sqlx::test]
async fn order_paging_beyond_any_offset_is_a_validation_error(db: PgPool) {
    let app = spawn_app(&db).await;
    for (query, field) in [
        ("page=9223372036854775807", "page"),
        ("page=4611686018427387904&perPage=200", "page"),
        ("page=0", "page"),
        ("perPage=201", "perPage"),
    ] {
        let response = admin_get(&app, &format!("/admin/api/orders?{query}")).await;
        assert_eq!(response.status(), 400, "{query}");
        let body = json(response).await;
        assert_eq!(body["code"], "VALIDATION_FAILED", "{query}");
        assert_eq!(body["field"], field, "{query}");
    }
    let last_allowed = admin_get(&app, "/admin/api/orders?page=100000&perPage=200").await;
    assert_eq!(last_allowed.status(), 200);
    assert_eq!(json(last_allowed).await["orders"], json!([]));
}

/// Concurrent edits of different rules of one policy all stand: each is a
/// read-modify-write of the stored policy under its row lock, never a merge into a copy
/// read before another edit committed.
#[sqlx::test]
async fn concurrent_edits_of_one_policy_are_all_kept(db: PgPool) {
    let app = spawn_app(&db).await;
    for round in 1..=8u64 {
        let edits = [
            ("api", 1_000 + round),
            ("user", 3 + round),
            ("ip", 5 + round),
        ];
        let responses = futures_util::future::join_all(edits.iter().map(|(rule, threshold)| {
            put_policy(
                &app,
                "seckill",
                json!({ "rules": [{ "name": rule, "threshold": threshold }] }),
            )
        }))
        .await;
        for response in responses {
            assert_eq!(response.status(), 200, "round {round}");
        }
        let seckill = stored_policy(&app, "seckill").await;
        for (rule, threshold) in edits {
            let found = seckill["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == rule)
                .unwrap();
            assert_eq!(found["threshold"], threshold, "round {round}: {rule} lost");
        }
    }
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
    assert_eq!(sign_in(&app, "10.57.0.1", "guess").await.status(), 401);
    assert_eq!(sign_in(&app, "10.57.0.1", ADMIN_TOKEN).await.status(), 200);
    assert_eq!(
        app.metric_sum(r#"seckill_limiter_fail_open_total{policy="admin_auth"}"#)
            .await,
        2.0
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
            assert_eq!(sign_in(app, "10.58.0.1", "guess").await.status(), 401);
        }
        let locked = sign_in(app, "10.58.0.1", ADMIN_TOKEN).await;
        assert_eq!(locked.status(), 429, "locked out, right token or not");
        assert_eq!(json(locked).await["code"], "RATE_LIMITED");
    }
    assert_eq!(token_comparisons(&first).await, 2.0);
    assert_eq!(token_comparisons(&second).await, 2.0);
    // Right tokens never count: another address signs in, then still has its 2 guesses.
    for _ in 0..3 {
        assert_eq!(
            sign_in(&first, "10.58.0.2", ADMIN_TOKEN).await.status(),
            200
        );
    }
    for expected in [401, 401, 429] {
        assert_eq!(
            sign_in(&first, "10.58.0.2", "guess").await.status(),
            expected
        );
    }
    assert_eq!(
        first
            .metric_sum(r#"seckill_limiter_mode{mode="local",policy="admin_auth"}"#)
            .await,
        1.0
    );
}

/// `PUT /admin/api/policies/{name}` with an `If-Match` header, if any.
async fn put_policy_if_match(
    app: &TestApp,
    name: &str,
    if_match: &str,
    body: serde_json::Value,
) -> reqwest::Response {
    app.client
        .put(app.url(&format!("/admin/api/policies/{name}")))
        .bearer_auth(ADMIN_TOKEN)
        .header("If-Match", if_match)
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn etag(response: &reqwest::Response) -> Option<&str> {
    response.headers().get("etag")?.to_str().ok()
}

#[sqlx::test]
async fn one_policy_is_served_with_its_version_as_an_etag(db: PgPool) {
    let app = spawn_app(&db).await;
    let listed = json(admin_get(&app, "/admin/api/policies").await).await;
    for policy in listed["policies"].as_array().unwrap() {
        assert_eq!(policy["version"], 1, "{policy}");
    }

    let one = admin_get(&app, "/admin/api/policies/limited").await;
    assert_eq!((one.status().as_u16(), etag(&one)), (200, Some(r#""1""#)));
    let body = json(one).await;
    assert_eq!(
        (&body["name"], &body["version"]),
        (&json!("limited"), &json!(1))
    );
    assert_eq!(body["rules"][0]["threshold"], 100);

    let changed = put_policy(
        &app,
        "limited",
        json!({ "rules": [{ "name": "client", "threshold": 7 }] }),
    )
    .await;
    assert_eq!(
        (changed.status().as_u16(), etag(&changed)),
        (200, Some(r#""2""#))
    );
    assert_eq!(json(changed).await["version"], 2);
    let one = admin_get(&app, "/admin/api/policies/limited").await;
    assert_eq!(etag(&one), Some(r#""2""#));
    assert_eq!(stored_policy(&app, "limited").await["version"], 2);
    assert_eq!(stored_policy(&app, "seckill").await["version"], 1);

    let missing = admin_get(&app, "/admin/api/policies/no_such_policy").await;
    assert_eq!(missing.status(), 404);
    assert_eq!(json(missing).await["code"], "NOT_FOUND");
}

/// Two operators edit the same loaded policy at once: one edit stands, the other is
/// refused with the version it missed, instead of silently overwriting (or being
/// merged into) a change its author never saw.
#[sqlx::test]
async fn two_edits_of_the_same_loaded_version_one_stands_one_conflicts(db: PgPool) {
    let app = spawn_app(&db).await;
    for round in 1..=5u64 {
        let loaded = stored_policy(&app, "seckill").await["version"]
            .as_u64()
            .unwrap();
        assert_eq!(loaded, round, "one bump per round");
        let edits = [("user", 10 + round), ("ip", 20 + round)];
        let responses = futures_util::future::join_all(edits.iter().map(|(rule, threshold)| {
            put_policy(
                &app,
                "seckill",
                json!({ "version": loaded, "rules": [{ "name": rule, "threshold": threshold }] }),
            )
        }))
        .await;
        let mut statuses: Vec<u16> = responses.iter().map(|r| r.status().as_u16()).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "round {round}");
        for response in responses {
            if response.status() == 409 {
                let error = json(response).await;
                assert_eq!(error["code"], "VERSION_CONFLICT", "round {round}");
                assert_eq!(error["currentVersion"], loaded + 1, "round {round}");
            }
        }
        let seckill = stored_policy(&app, "seckill").await;
        assert_eq!(seckill["version"], loaded + 1, "round {round}");
        let kept = edits
            .iter()
            .filter(|(rule, threshold)| {
                seckill["rules"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|r| r["name"] == *rule && r["threshold"] == *threshold)
            })
            .count();
        assert_eq!(kept, 1, "round {round}: exactly the winning edit is stored");
    }
    let audited: i64 = sqlx::query_scalar("SELECT count(*) FROM limiter_policy_audit")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(audited, 5);
}

#[sqlx::test]
async fn a_stale_if_match_conflicts_and_an_edit_without_a_version_still_stands(db: PgPool) {
    let app = spawn_app(&db).await;
    let edit = |threshold: u64| json!({ "rules": [{ "name": "client", "threshold": threshold }] });

    let first = put_policy_if_match(&app, "limited", r#""1""#, edit(7)).await;
    assert_eq!(
        (first.status().as_u16(), etag(&first)),
        (200, Some(r#""2""#))
    );

    let stale = put_policy_if_match(&app, "limited", r#""1""#, edit(8)).await;
    assert_eq!(stale.status(), 409);
    let error = json(stale).await;
    assert_eq!(
        (&error["code"], &error["currentVersion"]),
        (&json!("VERSION_CONFLICT"), &json!(2))
    );
    let stale_body = put_policy(&app, "limited", json!({ "version": 1, "rules": [] })).await;
    assert_eq!(stale_body.status(), 409);

    let unconditional = put_policy(&app, "limited", edit(9)).await;
    assert_eq!(
        (unconditional.status().as_u16(), etag(&unconditional)),
        (200, Some(r#""3""#))
    );
    let current = put_policy_if_match(&app, "limited", r#""3""#, edit(10)).await;
    assert_eq!(current.status(), 200);
    let stored = stored_policy(&app, "limited").await;
    assert_eq!(
        (&stored["version"], &stored["rules"][0]["threshold"]),
        (&json!(4), &json!(10))
    );

    // A precondition that is not one of our entity tags is a client error, not a guess.
    for bad in ["3", r#"W/"4""#, r#""4", "5""#] {
        let response = put_policy_if_match(&app, "limited", bad, edit(11)).await;
        assert_eq!(response.status(), 400, "{bad}");
        assert_eq!(json(response).await["field"], "If-Match", "{bad}");
    }
    let disagreeing = put_policy_if_match(
        &app,
        "limited",
        r#""4""#,
        json!({ "version": 3, "rules": [] }),
    )
    .await;
    assert_eq!(disagreeing.status(), 400);
    assert_eq!(stored_policy(&app, "limited").await["version"], 4);
}

/// A fail mode is an operator's edit like any other, and one made while Redis is down
/// reaches every instance during the outage (the watcher rereads Postgres on a timer
/// when Redis cannot give it the rules' version).
#[sqlx::test]
async fn a_fail_mode_changed_during_an_outage_applies_on_every_instance(db: PgPool) {
    let mut redis = OwnRedis::start().await;
    let url = redis.url();
    let one = spawn_app_with(&db, |s| use_own_redis(s, url)).await;
    let two = spawn_app_from(one.settings.clone()).await;
    let limited = |app: &TestApp| {
        let request = app
            .client
            .get(app.url("/api/limited"))
            .header("X-Client-Id", "fail-mode-test");
        async move { request.send().await.unwrap().status().as_u16() }
    };
    redis.stop();
    assert_eq!(limited(&two).await, 200, "`limited` fails open by default");
    let closed = one
        .client
        .put(one.url("/admin/api/policies/limited"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&json!({ "failMode": "closed", "rules": [] }))
        .send()
        .await
        .unwrap();
    assert_eq!(closed.status(), 200);
    assert_eq!(json(closed).await["failMode"], "closed");
    eventually(
        "the other instance fails closed",
        Duration::from_secs(10),
        || async { (limited(&two).await == 503).then_some(()) },
    )
    .await;
    let audit = json(admin_get(&one, "/admin/api/audit?policy=limited").await).await;
    assert_eq!(audit["entries"][0]["new"]["failMode"], "closed", "{audit}");
}
