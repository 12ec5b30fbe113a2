//! `GET /metrics`: Prometheus text exposition.

use actix_web::{web, HttpResponse};

use crate::error::ApiError;
use crate::metrics::Metrics;

pub async fn metrics(metrics: web::Data<Metrics>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(metrics.render()?))
}
