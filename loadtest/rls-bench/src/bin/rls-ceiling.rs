//! `rls-ceiling`: what a gRPC rate-limit path costs at best on this machine.
//!
//! Behind the shared minimal front (src/lib.rs): per request, ONE call of
//! `lua/fixed_window.lua` (or `lua/sliding_window.lua` with
//! `CEILING_RLS_ALGORITHM=sliding_window`, its member unique per request) through
//! `redis::Script` (EVALSHA), with the three descriptors' keys and the limits the app's
//! domain has, on the same Redis; then a constant answer:
//! OK when the script admitted, OVER_LIMIT when it refused (from the reply's first
//! element, as `loadtest/ceiling` answers 200 or 429). No domain lookup, no key bounds,
//! no statuses, no headers, no metrics, no logging.
//!
//! Keys are `<SECKILL_REDIS_KEY_PREFIX>:{rls:<domain>}:<algorithm>:<key>:<value>`, one
//! hash tag per domain as the app keys a domain (docs/edge.md). One multiplexed connection per runtime
//! thread, taken in turn.

use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use redis::aio::MultiplexedConnection;
use rls_bench::{env, limits, serve, value, Decide, KEYS};

struct Ceiling {
    connections: Vec<MultiplexedConnection>,
    next: AtomicUsize,
    script: redis::Script,
    algorithm: String,
    prefix: String,
    /// The sliding log's members are `<run>-<n>`: unique per request, across restarts too.
    run: String,
    member: AtomicU64,
    rules: [(u64, u64); 3],
}

impl Decide for Ceiling {
    async fn decide(&self, request: RateLimitRequest) -> Result<bool, String> {
        let mut call = self.script.prepare_invoke();
        for key in KEYS {
            let v = value(&request, key).ok_or_else(|| format!("no {key} descriptor"))?;
            call.key(format!(
                "{}:{{rls:{}}}:{}:{key}:{v}",
                self.prefix, request.domain, self.algorithm
            ));
        }
        // Now from the Redis clock, the request id, every rule enforced (the contract in
        // src/limiter/backend.rs).
        let n = self.member.fetch_add(1, Ordering::Relaxed);
        call.arg("")
            .arg(format!("{}-{n}", self.run))
            .arg(KEYS.len());
        for (window_ms, threshold) in self.rules {
            call.arg(window_ms).arg(threshold);
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
        let mut conn = self.connections[i].clone();
        let reply: Vec<i64> = call
            .invoke_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        Ok(reply.first() == Some(&1))
    }
}

fn main() -> io::Result<()> {
    serve(async {
        let url: String = env("REDIS_URL", "redis://127.0.0.1:6380".into())?;
        let client = redis::Client::open(url).map_err(io::Error::other)?;
        let mut connections = Vec::new();
        for _ in 0..env("SECKILL_WORKERS", 2usize)?.max(1) {
            let conn = client.get_multiplexed_async_connection().await;
            connections.push(conn.map_err(io::Error::other)?);
        }
        let (thresholds, window_s) = limits()?;
        let algorithm: String = env("CEILING_RLS_ALGORITHM", "fixed_window".into())?;
        let script = match algorithm.as_str() {
            "fixed_window" => include_str!("../../../../lua/fixed_window.lua"),
            "sliding_window" => include_str!("../../../../lua/sliding_window.lua"),
            other => return Err(io::Error::other(format!("CEILING_RLS_ALGORITHM={other:?}"))),
        };
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Ok(Ceiling {
            connections,
            next: AtomicUsize::new(0),
            script: redis::Script::new(script),
            algorithm,
            prefix: env("SECKILL_REDIS_KEY_PREFIX", "rls-ceiling".into())?,
            run: format!("c{:x}", started.as_nanos()),
            member: AtomicU64::new(0),
            rules: thresholds.map(|t| (window_s * 1000, t)),
        })
    })
}
