//! `rls-limitador`: the peer. Kuadrant's Limitador engine (the `limitador` crate) on
//! its Redis storage, behind the same minimal front as `rls-ceiling`, with the same three
//! limits as fixed windows on the same Redis.
//!
//! As limitador-server reads a request: the namespace is the request's `domain`, the
//! descriptors are bound as the CEL list `descriptors` (one map of entries each), and
//! each limit counts per value of `descriptors[i].<key>`; one
//! `check_rate_limited_and_update` with delta 1 per request.
//!
//! `BENCH_LIMITADOR_MODE`: `exact` (default; `AsyncRedisStorage`: every decision reads
//! and writes Redis) or `cached` (`CachedRedisStorage`: counters kept in process, their
//! increments flushed to Redis in batches, its defaults but the counters it caches:
//! `BENCH_LIMITADOR_MAX_CACHED`, 100 000 rather than 10 000). At its default, more
//! distinct counters pending a flush than that deadlocked it on two runtime threads
//! within a second of the admitted mix (30 000 counters): `Batcher::add` awaits a permit
//! while holding its DashMap shard, and the flusher, which would free the permits,
//! blocks its thread on that shard. The domain is fixed at start:
//! `BENCH_RLS_DOMAIN` (default `bench`); Limitador's keys are
//! `namespace:{<domain>},counter:...`.

use std::collections::HashMap;
use std::io;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use limitador::limit::{Context, Expression, Limit};
use limitador::storage::redis::{AsyncRedisStorage, CachedRedisStorageBuilder};
use limitador::AsyncRateLimiter;
use rls_bench::{env, limits, serve, Decide, KEYS};

struct Peer(AsyncRateLimiter);

impl Decide for Peer {
    async fn decide(&self, request: RateLimitRequest) -> Result<bool, String> {
        let descriptors: Vec<HashMap<String, String>> = request
            .descriptors
            .into_iter()
            .map(|d| d.entries.into_iter().map(|e| (e.key, e.value)).collect())
            .collect();
        let mut ctx = Context::default();
        ctx.list_binding("descriptors".to_string(), descriptors);
        let result = self
            .0
            .check_rate_limited_and_update(&request.domain.as_str().into(), &ctx, 1)
            .await
            .map_err(|e| e.to_string())?;
        Ok(!result.limited)
    }
}

fn main() -> io::Result<()> {
    serve(async {
        let url: String = env("REDIS_URL", "redis://127.0.0.1:6380".into())?;
        let mode: String = env("BENCH_LIMITADOR_MODE", "exact".into())?;
        let limiter = match mode.as_str() {
            "exact" => AsyncRateLimiter::new_with_storage(Box::new(
                AsyncRedisStorage::new(&url)
                    .await
                    .map_err(io::Error::other)?,
            )),
            "cached" => AsyncRateLimiter::new_with_storage(Box::new(
                CachedRedisStorageBuilder::new(&url)
                    .max_cached_counters(env("BENCH_LIMITADOR_MAX_CACHED", 100_000)?)
                    .build()
                    .await
                    .map_err(io::Error::other)?,
            )),
            other => return Err(io::Error::other(format!("BENCH_LIMITADOR_MODE={other:?}"))),
        };
        let domain: String = env("BENCH_RLS_DOMAIN", "bench".into())?;
        let (thresholds, window_s) = limits()?;
        for (i, (key, threshold)) in KEYS.iter().zip(thresholds).enumerate() {
            let variable = Expression::parse(format!("descriptors[{i}].{key}"))
                .map_err(|e| io::Error::other(format!("{e:?}")))?;
            let limit = Limit::new(domain.as_str(), threshold, window_s, [], [variable]);
            limiter.add_limit(limit);
        }
        Ok(Peer(limiter))
    })
}
