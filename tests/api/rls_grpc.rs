//! Envoy's rate-limit service over gRPC (issue 40), asked with tonic's client from the
//! same envoy-types: statuses per descriptor, costs, unknown domains and descriptors,
//! shadow rules, live edits over two instances, each fail mode without Redis, the input
//! bounds, and a malformed frame. Windows are a day long, so none rolls over mid-test.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{rate_limit::Unit, Code};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::PgPool;

use seckill_test_support::{
    eventually, spawn_app, spawn_app_from, test_settings, use_own_redis, OwnRedis, TestApp,
};

/// A domain whose top-level descriptors each limit their key to `limit` a day.
fn domain(name: &str, limits: &[(&str, u32)]) -> Value {
    json!({
        "domain": name,
        "descriptors": limits.iter().map(|(key, limit)| json!({
            "key": key,
            "rate_limit": { "name": key, "unit": "day", "requests_per_unit": limit }
        })).collect::<Vec<_>>()
    })
}

/// Stores `document` through the admin API and waits until `app` decides with it.
async fn put_domain(app: &TestApp, document: Value) {
    let name = document["domain"].as_str().expect("a domain").to_string();
    let response = app
        .rls_domain(Method::PUT, &name, Some(document), None)
        .await;
    assert!(response.status().is_success(), "{}", response.status());
    let version: i64 = response.headers()["etag"]
        .to_str()
        .expect("an ETag")
        .trim_matches('"')
        .parse()
        .expect("a version");
    eventually("the domain in force", Duration::from_secs(5), || async {
        (app.domains.current(&name).map(|d| d.version) == Some(version)).then_some(())
    })
    .await;
}

fn descriptor(entries: &[(&str, &str)], hits: Option<u64>) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).into(),
                value: (*value).into(),
            })
            .collect(),
        hits_addend: hits.map(|value| UInt64Value { value }),
        ..RateLimitDescriptor::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: hits,
    }
}

async fn ask(app: &TestApp, request: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
    app.rls()
        .await
        .should_rate_limit(request)
        .await
        .map(tonic::Response::into_inner)
}

/// One descriptor `key=value` of `domain`, at cost 1.
async fn one(app: &TestApp, domain: &str, key: &str) -> RateLimitResponse {
    ask(
        app,
        request(domain, vec![descriptor(&[(key, "v")], None)], 0),
    )
    .await
    .expect("an answer")
}

fn codes(response: &RateLimitResponse) -> (i32, Vec<i32>) {
    (
        response.overall_code,
        response.statuses.iter().map(|s| s.code).collect(),
    )
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// The tests whose code depends on the Redis topology: they run again on a Redis Cluster
/// (docs/testing.md, "The cluster pass"): a domain's keys share one slot.
mod topology {
    use super::*;

    #[sqlx::test]
    async fn a_full_descriptor_counts_nothing_for_the_others(db: PgPool) {
        let app = spawn_app(&db).await;
        put_domain(&app, domain("gateway", &[("a", 5), ("b", 5), ("c", 1)])).await;
        let three = || {
            request(
                "gateway",
                vec![
                    descriptor(&[("a", "x")], None),
                    descriptor(&[("b", "x")], None),
                    descriptor(&[("c", "x")], None),
                ],
                0,
            )
        };
        let first = ask(&app, three()).await.expect("an answer");
        assert_eq!(codes(&first), (OK, vec![OK, OK, OK]));
        let limit = first.statuses[0].current_limit.as_ref().expect("a limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("a", 5, Unit::Day as i32)
        );

        let refused = ask(&app, three()).await.expect("an answer");
        assert_eq!(codes(&refused), (OVER, vec![OK, OK, OVER]));
        assert!(refused.statuses[2].duration_until_reset.is_some());
        let headers: Vec<&str> = refused
            .response_headers_to_add
            .iter()
            .map(|h| h.key.as_str())
            .collect();
        assert!(headers.contains(&"Retry-After"), "{headers:?}");

        // a and b counted the first request only: the refused one wrote nothing.
        for key in ["a", "b"] {
            let alone = ask(
                &app,
                request("gateway", vec![descriptor(&[(key, "x")], None)], 0),
            )
            .await
            .expect("an answer");
            assert_eq!(codes(&alone), (OK, vec![OK]));
            assert_eq!(alone.statuses[0].limit_remaining, 3, "{key}");
        }
        assert_eq!(
            app.metric_sum(
                r#"seckill_rls_decisions_total{domain="gateway",outcome="reject",rule="c"}"#
            )
            .await,
            1.0
        );
    }
}

#[sqlx::test]
async fn a_refused_cost_of_five_counts_nothing_and_a_cost_of_one_is_admitted(db: PgPool) {
    let app = spawn_app(&db).await;
    put_domain(&app, domain("gateway", &[("a", 4), ("b", 4)])).await;
    // `a` by the request's cost; `b` by the descriptor's own, over the request's.
    let costs = [
        ("a", (None, 5), (None, 1)),
        ("b", (Some(5), 1), (Some(1), 5)),
    ];
    for (key, refused, admitted) in costs {
        let with = |(own, of_request): (Option<u64>, u32)| {
            request("gateway", vec![descriptor(&[(key, "x")], own)], of_request)
        };
        let five = ask(&app, with(refused)).await.expect("an answer");
        assert_eq!(codes(&five), (OVER, vec![OVER]), "{key}");
        let one_more = ask(&app, with(admitted)).await.expect("an answer");
        assert_eq!(codes(&one_more), (OK, vec![OK]), "{key}");
        assert_eq!(one_more.statuses[0].limit_remaining, 3, "{key}");
    }
}

#[sqlx::test]
async fn an_unknown_domain_and_an_unknown_descriptor_are_ok_without_a_limit(db: PgPool) {
    let app = spawn_app(&db).await;
    put_domain(&app, domain("gateway", &[("a", 1)])).await;
    for domain in ["nowhere", "gateway"] {
        for _ in 0..2 {
            let answer = one(&app, domain, "unknown_key").await;
            assert_eq!(codes(&answer), (OK, vec![OK]), "{domain}");
            assert_eq!(answer.statuses[0].current_limit, None, "{domain}");
            assert!(answer.response_headers_to_add.is_empty(), "{domain}");
        }
    }
    for domain in ["unknown", "gateway"] {
        let series = format!(
            r#"seckill_rls_decisions_total{{domain="{domain}",outcome="pass",rule="none"}}"#
        );
        assert_eq!(app.metric_sum(&series).await, 2.0, "{series}");
    }
}

/// A domain whose descriptor `a` has a shadow rule `watched` of 1 a day, beside an
/// enforced `b` of 100 a day unless `only_shadow`.
fn shadowed(only_shadow: bool, name: &str, algorithm: &str) -> Value {
    let mut descriptors = vec![json!({
        "key": "a",
        "shadow_mode": true,
        "rate_limit": { "name": "watched", "unit": "day", "requests_per_unit": 1 }
    })];
    if !only_shadow {
        descriptors.push(json!({
            "key": "b",
            "rate_limit": { "name": "b", "unit": "day", "requests_per_unit": 100 }
        }));
    }
    json!({ "domain": name, "algorithm": algorithm, "descriptors": descriptors })
}

/// Three requests over the shadow rule: each OK, each status naming the rule with
/// nothing left, and the metrics say which two it would have refused.
async fn over_a_shadow_rule(app: &TestApp, domain: &str, with: &[(&str, &str)]) {
    for _ in 0..3 {
        let descriptors = std::iter::once(("a", "v"))
            .chain(with.iter().copied())
            .map(|entry| descriptor(&[entry], None))
            .collect();
        let answer = ask(app, request(domain, descriptors, 0))
            .await
            .expect("an answer");
        assert_eq!(answer.overall_code, OK);
        let status = &answer.statuses[0];
        assert_eq!(status.code, OK);
        assert_eq!(
            status.current_limit.as_ref().map(|l| l.name.as_str()),
            Some("watched")
        );
        assert_eq!(status.limit_remaining, 0);
    }
    let series = |outcome: &str| {
        format!(
            r#"seckill_rls_decisions_total{{domain="{domain}",outcome="{outcome}",rule="watched"}}"#
        )
    };
    assert_eq!(app.metric_sum(&series("pass")).await, 1.0);
    assert_eq!(app.metric_sum(&series("reject")).await, 2.0);
    assert_eq!(
        app.metric_sum("seckill_rls_fail_mode_total").await,
        0.0,
        "{domain}"
    );
}

#[sqlx::test]
async fn a_shadow_rule_over_its_limit_answers_ok_and_says_it(db: PgPool) {
    let app = spawn_app(&db).await;
    put_domain(&app, shadowed(false, "gateway", "fixed_window")).await;
    over_a_shadow_rule(&app, "gateway", &[("b", "v")]).await;
}

/// With no enforced rule in the call, every script still decides (it once failed
/// there, and the domain fell back to its fail mode).
#[sqlx::test]
async fn a_domain_of_shadow_rules_only_is_decided_by_redis_under_every_algorithm(db: PgPool) {
    let app = spawn_app(&db).await;
    for algorithm in [
        "fixed_window",
        "sliding_window",
        "sliding_window_counter",
        "token_bucket",
        "gcra",
    ] {
        put_domain(&app, shadowed(true, algorithm, algorithm)).await;
        over_a_shadow_rule(&app, algorithm, &[]).await;
    }
}

#[sqlx::test]
async fn a_raised_limit_admits_on_the_other_instance_within_the_reload(db: PgPool) {
    let a = spawn_app(&db).await;
    let b = spawn_app_from(a.settings.clone()).await;
    put_domain(&a, domain("gateway", &[("a", 1)])).await;
    eventually("b has the domain", Duration::from_secs(5), || async {
        b.domains.current("gateway").is_some().then_some(())
    })
    .await;
    assert_eq!(codes(&one(&b, "gateway", "a").await), (OK, vec![OK]));
    assert_eq!(codes(&one(&b, "gateway", "a").await), (OVER, vec![OVER]));

    put_domain(&a, domain("gateway", &[("a", 3)])).await;
    let (remaining, took) = eventually("b admits", Duration::from_secs(5), || async {
        let answer = one(&b, "gateway", "a").await;
        (answer.overall_code == OK).then(|| answer.statuses[0].limit_remaining)
    })
    .await;
    println!("raised limit in force on the other instance after {took:?}");
    // The one admission before counts under the raised limit: one more was admitted now.
    assert_eq!(remaining, 1);
}

#[sqlx::test]
async fn without_redis_each_domain_answers_by_its_fail_mode(db: PgPool) {
    let mut redis = OwnRedis::start().await;
    let mut settings = test_settings(&db);
    use_own_redis(&mut settings, redis.url());
    let app = spawn_app_from(settings).await;
    for mode in ["open", "closed", "local"] {
        let mut document = domain(mode, &[("a", 2)]);
        document["fail_mode"] = json!(mode);
        put_domain(&app, document).await;
        assert_eq!(codes(&one(&app, mode, "a").await), (OK, vec![OK]), "{mode}");
    }

    redis.stop();
    let overall = |mode: &'static str| {
        let app = &app;
        async move {
            let mut codes = Vec::new();
            for _ in 0..3 {
                codes.push(one(app, mode, "a").await.overall_code);
            }
            codes
        }
    };
    assert_eq!(overall("open").await, [OK, OK, OK]);
    assert_eq!(overall("closed").await, [OVER, OVER, OVER]);
    // In process, from nothing: this instance's share of 2 (it is the only one).
    assert_eq!(overall("local").await, [OK, OK, OVER]);
    for (mode, count) in [("open", 3.0), ("closed", 3.0), ("local", 3.0)] {
        let series = format!(r#"seckill_rls_fail_mode_total{{domain="{mode}",mode="{mode}"}}"#);
        assert_eq!(app.metric_sum(&series).await, count, "{series}");
    }
}

#[sqlx::test]
async fn an_oversized_entry_and_seventeen_descriptors_are_invalid_arguments(db: PgPool) {
    let app = spawn_app(&db).await;
    put_domain(&app, domain("gateway", &[("a", 5)])).await;
    let long = "x".repeat(257);
    let oversized = ask(
        &app,
        request(
            "gateway",
            vec![
                descriptor(&[("a", "x")], None),
                descriptor(&[("a", &long)], None),
            ],
            0,
        ),
    )
    .await
    .expect_err("refused");
    assert_eq!(oversized.code(), tonic::Code::InvalidArgument);
    assert!(
        oversized.message().starts_with("descriptors[1].entries[0]"),
        "{}",
        oversized.message()
    );

    let seventeen = (0..17).map(|_| descriptor(&[("a", "x")], None)).collect();
    let many = ask(&app, request("gateway", seventeen, 0))
        .await
        .expect_err("refused");
    assert_eq!(many.code(), tonic::Code::InvalidArgument);
    assert_eq!(many.message(), "at most 16 descriptors per request");

    assert_eq!(
        app.metric_sum("seckill_rls_invalid_requests_total").await,
        2.0
    );
    // Nothing was counted: the whole quota is left.
    assert_eq!(
        one(&app, "gateway", "a").await.statuses[0].limit_remaining,
        4
    );
}

/// Sends one gRPC call by hand: `frame` as the whole request body. Answers its
/// `grpc-status` (from the headers of a trailers-only answer, else from the trailers).
async fn raw_call(port: u16, frame: Vec<u8>) -> String {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connected");
    let (mut client, connection) = h2::client::handshake(tcp).await.expect("HTTP/2");
    tokio::spawn(connection);
    let call = http::Request::post(format!(
        "http://127.0.0.1:{port}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .expect("a request");
    let (answer, mut body) = client.send_request(call, false).expect("sent");
    body.send_data(bytes::Bytes::from(frame), true)
        .expect("body sent");
    let answer = tokio::time::timeout(Duration::from_secs(5), answer)
        .await
        .expect("an answer, not a hang")
        .expect("an HTTP/2 answer");
    let status = |headers: &http::HeaderMap| {
        headers
            .get("grpc-status")
            .map(|v| v.to_str().expect("ASCII").to_string())
    };
    if let Some(code) = status(answer.headers()) {
        return code;
    }
    let mut body = answer.into_body();
    while let Some(chunk) = body.data().await {
        chunk.expect("body data");
    }
    let trailers = body.trailers().await.expect("trailers").expect("some");
    status(&trailers).expect("a grpc-status")
}

fn framed(message: &[u8], declared: u32) -> Vec<u8> {
    let mut frame = vec![0];
    frame.extend(declared.to_be_bytes());
    frame.extend(message);
    frame
}

#[sqlx::test]
async fn a_malformed_frame_fails_its_call_and_the_server_answers_after(db: PgPool) {
    let app = spawn_app(&db).await;
    put_domain(&app, domain("gateway", &[("a", 5)])).await;
    let port = app.rls_port.expect("a gRPC port");
    // Not protobuf: a varint that never ends.
    let garbage = [0xff_u8; 12];
    assert_ne!(raw_call(port, framed(&garbage, 12)).await, "0");
    // A frame cut short: it declares more than the body holds.
    assert_ne!(raw_call(port, framed(&garbage, 1_000)).await, "0");
    // Past the bound on a message: refused before it is read.
    let code = raw_call(port, framed(&[], 1 << 20)).await;
    assert_eq!(code, (tonic::Code::OutOfRange as i32).to_string());

    let answer = one(&app, "gateway", "a").await;
    assert_eq!(codes(&answer), (OK, vec![OK]));
    assert_eq!(answer.statuses[0].limit_remaining, 4);
}
