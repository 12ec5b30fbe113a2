//! `GET /metrics`: Prometheus text exposition.

use actix_web::{web, HttpResponse};
use sqlx::PgPool;

use crate::http::ApiError;
use crate::metrics::Metrics;
use crate::sale::Purchases;

/// `GET /metrics`: the Prometheus exposition of every family.
#[utoipa::path(get, path = "/metrics", operation_id = "getMetrics", tag = "operations", responses(
    (status = 200, description = "Prometheus text exposition (version 0.0.4)", body = String, content_type = "text/plain"),
))]
pub async fn metrics(
    metrics: web::Data<Metrics>,
    pool: web::Data<PgPool>,
    purchases: web::Data<Purchases>,
) -> Result<HttpResponse, ApiError> {
    // The pools' and the commit queue's state is read when Prometheus asks, not sampled in the background.
    let sessions = purchases.commit_sessions();
    for (name, open, idle) in [
        ("main", pool.size() as usize, pool.num_idle()),
        ("commit", sessions.open(), sessions.idle()),
    ] {
        let idle = idle as i64;
        metrics.db_pool.with_label_values(&[name, "idle"]).set(idle);
        metrics
            .db_pool
            .with_label_values(&[name, "in_use"])
            .set(open as i64 - idle);
    }
    metrics
        .commit_queue
        .set(purchases.commit_queue_len() as i64);
    metrics
        .shedding_in_flight
        .set(i64::from(purchases.overload().in_flight()));
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(metrics.render()?))
}
