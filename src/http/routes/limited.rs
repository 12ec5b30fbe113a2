//! `GET /api/limited?policy=sliding_window|token_bucket`: the limiter as a service for
//! trusted callers. The `RateLimit` guard on the route does all the work; reaching this
//! handler means the caller was admitted.

use actix_web::http::header::ContentType;
use actix_web::HttpResponse;

/// A constant answer, written once: this route's cost should be the limiter's.
pub async fn limited() -> HttpResponse {
    HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(r#"{"allowed":true}"#)
}
