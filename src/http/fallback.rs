//! The fallbacks that keep every answer, even for unknown paths and unparsable query
//! strings, in our JSON envelope.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{CONTENT_RANGE, CONTENT_TYPE, RANGE};
use actix_web::middleware::Next;
use actix_web::{web, HttpResponse, Resource, ResponseError};

use super::api_error::ApiError;

/// Fallback for paths no route matches: our JSON 404 instead of actix's empty one.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}

async fn method_not_allowed() -> Result<HttpResponse, ApiError> {
    Err(ApiError::MethodNotAllowed)
}

/// Query strings that do not parse answer our 400 envelope, not actix's text.
pub fn query_config() -> web::QueryConfig {
    web::QueryConfig::default().error_handler(|err, _| {
        ApiError::validation("query", format!("invalid query string: {err}")).into()
    })
}

/// Path segments that do not parse (`/admin/api/items/abc/pause`) answer 404 like any
/// path that names nothing.
pub fn path_config() -> web::PathConfig {
    web::PathConfig::default().error_handler(|_, _| ApiError::NotFound.into())
}

/// A resource whose unsupported methods answer our JSON 405. Use it for every route.
pub fn resource(path: &str) -> Resource {
    web::resource(path).default_service(web::to(method_not_allowed))
}

/// The static pages' errors in our envelope. actix-files answers a path it will not map
/// (a hidden file, an encoded `..`) with a plain-text 400, and a failed precondition or
/// an unsatisfiable range with an empty 412 or 416: each becomes the JSON answer the API
/// gives (a refused path is a 404 like any path that names nothing).
pub async fn static_errors(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let asked_range = request.headers().contains_key(RANGE);
    let response = next.call(request).await?;
    let status = response.status();
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return Ok(response.map_into_boxed_body());
    }
    let error = match status.as_u16() {
        400 if asked_range => {
            ApiError::validation("Range", "Range must be a byte range, e.g. bytes=0-99")
        }
        405 => ApiError::MethodNotAllowed,
        412 => ApiError::PreconditionFailed,
        416 => ApiError::RangeNotSatisfiable,
        500.. => ApiError::Internal(anyhow::anyhow!("the static pages answered {status}")),
        _ => ApiError::NotFound,
    };
    let content_range = response.headers().get(CONTENT_RANGE).cloned();
    let (request, _) = response.into_parts();
    let mut answer = error.error_response();
    if let Some(range) = content_range {
        answer.headers_mut().insert(CONTENT_RANGE, range);
    }
    Ok(ServiceResponse::new(request, answer).map_into_boxed_body())
}
