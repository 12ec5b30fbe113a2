//! The fallbacks that keep every answer, even for unknown paths and unparsable query
//! strings, in our JSON envelope.

use actix_web::{web, HttpResponse, Resource};

use super::error::ApiError;

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
