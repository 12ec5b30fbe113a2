//! `GET /api/limited?policy=<algorithm>`: the limiter as a service for trusted callers
//! (any of the six algorithms; `leaky_bucket` holds the answer for its departure slot
//! and says how long in `RateLimit-Delay-Ms`). The `RateLimit` guard on the route does all the work; reaching this
//! handler means the caller was admitted.

use actix_web::http::header::ContentType;
use actix_web::HttpResponse;

/// The admitted answer (written as a constant below).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // a schema only: the body is the constant below
pub struct Allowed {
    allowed: bool,
}

#[utoipa::path(get, path = "/api/limited", operation_id = "checkLimit", tag = "limiter",
    params(
        ("policy" = Option<crate::limiter::Algorithm>, Query, description = "The algorithm to decide with (each keeps its own quota); the policy's own when absent"),
        ("X-Client-Id" = Option<String>, Header, description = "The caller's id, 1 to 64 of `A-Z a-z 0-9 . _ : -`; the client IP when absent", pattern = r"^[A-Za-z0-9._:-]{1,64}$"),
    ),
    responses((status = 200, description = "Admitted (with `leaky_bucket`, after waiting for its departure slot: `RateLimit-Delay-Ms` says how long)", body = Allowed),
        (status = 403, description = "`BLOCKED`: an operator blocked the address", body = crate::http::api_error::ErrorBody)))]
/// A constant answer, written once: this route's cost should be the limiter's.
pub async fn limited() -> HttpResponse {
    HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(r#"{"allowed":true}"#)
}
