//! `GET /api/limited?policy=sliding_window|token_bucket`: the limiter as a service for
//! trusted callers. The `RateLimit` guard on the route does all the work; reaching this
//! handler means the caller was admitted.

use actix_web::HttpResponse;
use serde_json::json;

pub async fn limited() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "allowed": true }))
}
