//! Request counting and timing for `seckill_http_requests_total` and
//! `seckill_http_request_duration_seconds`, labelled by the matched route pattern, never
//! by the raw path: `/api/items/7` and `/api/items/8` are one series, unknown paths are
//! all `unmatched`, and unusual methods are `other`, so a scanner cannot mint series.

use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::web;

use crate::metrics::Metrics;

/// Counts and times one request under its route pattern (see the module docs).
pub async fn record(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let metrics = req.app_data::<web::Data<Metrics>>().cloned();
    let method = method_label(req.method());
    let started = Instant::now();
    let response = next.call(req).await?;
    if let Some(metrics) = metrics {
        // The static files are mounted at the root, so their pattern is empty: a file
        // that was served is `static`, anything not found there is `unmatched`.
        let route = match response.request().match_pattern() {
            Some(pattern) if !pattern.is_empty() => pattern,
            _ if response.status() == actix_web::http::StatusCode::NOT_FOUND => {
                "unmatched".to_string()
            }
            _ => "static".to_string(),
        };
        let status = match response.status().as_u16() {
            100..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        metrics
            .http_requests
            .with_label_values(&[route.as_str(), method, status])
            .inc();
        metrics
            .http_duration
            .with_label_values(&[route.as_str(), method])
            .observe(started.elapsed().as_secs_f64());
    }
    Ok(response)
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}
