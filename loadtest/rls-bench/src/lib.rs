//! The minimal tonic front both bench servers share (`rls-ceiling`, `rls-limitador`):
//! Envoy's `ShouldRateLimit` in, one decision out, an `overall_code` back and nothing
//! else (no per-descriptor statuses, no headers), so the figure is what a gRPC
//! rate-limit path costs at best around its store call.
//!
//! Both read the same settings: `SECKILL_RLS_PORT` (the listener, 127.0.0.1),
//! `SECKILL_WORKERS` (the runtime's threads, 2 as the app's gRPC runtime), `REDIS_URL`,
//! and the three limits the bench sets for the domain's descriptors `user`, `ip` and
//! `route`, in that order: `BENCH_RLS_LIMITS` (requests per window, comma separated)
//! and `BENCH_RLS_WINDOW_S` (one window for all three, fixed).

use std::future::Future;
use std::io;
use std::str::FromStr;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

/// The descriptor keys the bench's domain limits, in the order of `BENCH_RLS_LIMITS`.
pub const KEYS: [&str; 3] = ["user", "ip", "route"];

/// One store's decision for a request: admitted or not; an error becomes UNAVAILABLE.
pub trait Decide: Send + Sync + 'static {
    fn decide(
        &self,
        request: RateLimitRequest,
    ) -> impl Future<Output = Result<bool, String>> + Send;
}

struct Front<D>(D);

#[tonic::async_trait]
impl<D: Decide> RateLimitService for Front<D> {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let admitted = self
            .0
            .decide(request.into_inner())
            .await
            .map_err(tonic::Status::unavailable)?;
        let code = if admitted { Code::Ok } else { Code::OverLimit };
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: code as i32,
            ..Default::default()
        }))
    }
}

/// `name` parsed, or `default` when unset; an unparsable value is an error, not a default.
pub fn env<T: FromStr>(name: &str, default: T) -> io::Result<T> {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .map_err(|_| io::Error::other(format!("{name}={v:?} is not valid"))),
        Err(_) => Ok(default),
    }
}

/// `BENCH_RLS_LIMITS` and `BENCH_RLS_WINDOW_S`: (threshold per key, window in seconds).
pub fn limits() -> io::Result<([u64; 3], u64)> {
    let text: String = env(
        "BENCH_RLS_LIMITS",
        "1000000000,1000000000,1000000000".into(),
    )?;
    let parsed: Vec<u64> = text
        .split(',')
        .map(|v| v.trim().parse())
        .collect::<Result<_, _>>()
        .map_err(|_| io::Error::other(format!("BENCH_RLS_LIMITS={text:?} is not valid")))?;
    let limits: [u64; 3] = parsed
        .try_into()
        .map_err(|_| io::Error::other("BENCH_RLS_LIMITS needs three numbers"))?;
    Ok((limits, env("BENCH_RLS_WINDOW_S", 60)?))
}

/// The value of descriptor `key` in the request (its first entry with that key).
pub fn value<'a>(request: &'a RateLimitRequest, key: &str) -> Option<&'a str> {
    request
        .descriptors
        .iter()
        .flat_map(|d| d.entries.iter())
        .find(|e| e.key == key)
        .map(|e| e.value.as_str())
}

/// Serves `decide` on `SECKILL_RLS_PORT` with `SECKILL_WORKERS` runtime threads, until
/// killed (a bench tool: no graceful shutdown).
pub fn serve<D: Decide>(make: impl Future<Output = io::Result<D>>) -> io::Result<()> {
    let port: u16 = env("SECKILL_RLS_PORT", 8181)?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env("SECKILL_WORKERS", 2)?)
        .enable_all()
        .build()?
        .block_on(async move {
            let decide = make.await?;
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
            // As the app's server accepts: no Nagle delay on its answers.
            let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
            Server::builder()
                .serve_with_incoming_shutdown(
                    RateLimitServiceServer::new(Front(decide)),
                    incoming,
                    std::future::pending::<()>(),
                )
                .await
                .map_err(io::Error::other)
        })
}
