//! Liveness and readiness.
//!
//! `live` answers as long as the process serves: a supervisor restarts on its failure.
//! `ready` asks both stores, each under its own short timeout and at the same time, so a
//! load balancer takes the instance out while a store is away and back once it returns;
//! nothing is cached, so recovery needs no restart.

use std::time::Duration;

use actix_web::{web, HttpResponse};
use serde::Serialize;
use sqlx::PgPool;

use crate::http::ApiError;
use crate::store::{postgres_pool, RedisStore};

/// A probe's answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Probe {
    #[schema(value_type = String, example = "ready")]
    status: &'static str,
}

#[utoipa::path(get, path = "/health/live", operation_id = "checkLiveness", tag = "operations",
    responses((status = 200, description = "The process serves", body = Probe)))]
pub async fn live() -> HttpResponse {
    HttpResponse::Ok().json(Probe { status: "live" })
}

/// Per-probe timeout, injected as app data so tests and settings agree.
#[derive(Clone, Copy)]
pub struct ReadinessTimeout(pub Duration);

#[utoipa::path(get, path = "/health/ready", operation_id = "checkReadiness", tag = "operations", responses(
    (status = 200, description = "Redis and Postgres both answered", body = Probe),
    (status = 503, description = "`NOT_READY`: `down` lists the stores that did not answer", body = crate::http::api_error::ErrorBody),
))]
pub async fn ready(
    pool: web::Data<PgPool>,
    redis: web::Data<RedisStore>,
    timeout: web::Data<ReadinessTimeout>,
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
    if down.is_empty() {
        Ok(HttpResponse::Ok().json(Probe { status: "ready" }))
    } else {
        Err(ApiError::NotReady { down })
    }
}

/// The readiness budget, which may be shorter than the store's own call timeout.
async fn redis_ping(redis: &RedisStore, timeout: Duration) -> anyhow::Result<()> {
    tokio::time::timeout(timeout, redis.ping())
        .await
        .map_err(|_| anyhow::anyhow!("redis did not answer within {timeout:?}"))??;
    Ok(())
}
