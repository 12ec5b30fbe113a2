//! Liveness and readiness.
//!
//! `live` answers as long as the process serves: a supervisor restarts on its failure.
//! `ready` asks both stores, each under its own short timeout and at the same time, so a
//! load balancer takes the instance out while a store is away and back once it returns;
//! nothing is cached, so recovery needs no restart.
//!
//! `ready` also says what is degraded without failing: the orders breaker open or
//! probing (`orders_breaker_open`, `orders_breaker_half_open`). An open breaker does not
//! make the instance unready: it still answers every other route, and its purchases are
//! refused at once with a `Retry-After`; taking it out of the balancer would only move
//! its shoppers to instances that share the same Postgres. Readiness fails only when a
//! store does not answer its ping, as before.

use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde::Serialize;
use sqlx::PgPool;

use crate::http::ApiError;
use crate::sale::Purchases;
use crate::store::{postgres_pool, RedisStore};
use crate::vocabulary::BreakerState;

/// A probe's answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Probe {
    /// `live`; `ready`, or `degraded` when ready with something in `degraded`.
    #[schema(value_type = String, example = "ready")]
    status: &'static str,
    /// What works less well than it should, while the instance still serves.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>)]
    degraded: Vec<&'static str>,
}

/// `GET /health/live`: the process serves (no store is asked).
#[utoipa::path(get, path = "/health/live", operation_id = "checkLiveness", tag = "operations",
    responses((status = 200, description = "The process serves", body = Probe)))]
pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(Probe {
        status: "live",
        degraded: Vec::new(),
    })
}

/// Per-probe timeout, injected as app data so tests and settings agree.
#[derive(Clone, Copy)]
pub struct ReadinessTimeout(pub Duration);

/// `GET /health/ready`: Redis and Postgres both answer within the readiness timeout.
#[utoipa::path(get, path = "/health/ready", operation_id = "checkReadiness", tag = "operations", responses(
    (status = 200, description = "Redis and Postgres both answered; `status` is `degraded` and `degraded` says why when the orders breaker is open (`orders_breaker_open`) or probing (`orders_breaker_half_open`)", body = Probe),
    (status = 503, description = "`NOT_READY`: `down` lists the stores that did not answer, `degraded` what else is wrong", body = crate::http::api_error::ErrorBody),
))]
pub async fn ready(
    pool: web::Data<PgPool>,
    redis: web::Data<RedisStore>,
    timeout: web::Data<ReadinessTimeout>,
    purchases: web::Data<Purchases>,
) -> Result<HttpResponse, ApiError> {
    let (redis_probe, pg_probe) = tokio::join!(
        redis_ping(&redis, timeout.0),
        postgres_pool::ping(&pool, timeout.0)
    );
    let mut down = Vec::new();
    if let Err(e) = redis_probe {
        tracing::warn!(error = %format!("{e:#}"), "readiness: redis down");
        down.push("redis");
    }
    if let Err(e) = pg_probe {
        tracing::warn!(error = %format!("{e:#}"), "readiness: postgres down");
        down.push("postgres");
    }
    let degraded: Vec<&'static str> = match purchases.overload().breaker_state() {
        BreakerState::Closed => vec![],
        BreakerState::Open => vec!["orders_breaker_open"],
        BreakerState::HalfOpen => vec!["orders_breaker_half_open"],
    };
    if !down.is_empty() {
        return Err(ApiError::NotReady { down, degraded });
    }
    let status = if degraded.is_empty() {
        "ready"
    } else {
        "degraded"
    };
    Ok(HttpResponse::Ok().json(Probe { status, degraded }))
}

/// The readiness budget, which may be shorter than the store's own call timeout.
async fn redis_ping(redis: &RedisStore, timeout: Duration) -> anyhow::Result<()> {
    tokio::time::timeout(timeout, redis.ping())
        .await
        .map_err(|_| anyhow::anyhow!("redis did not answer within {timeout:?}"))??;
    Ok(())
}
