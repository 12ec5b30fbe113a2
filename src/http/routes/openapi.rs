//! `GET /api/openapi.json`: the API contract ([`crate::http::openapi`]).

use actix_web::http::header::ContentType;
use actix_web::{web, HttpResponse};

/// The document, rendered once at start-up: it cannot change while the process runs.
#[derive(Clone)]
pub struct OpenApiJson(pub web::Bytes);

/// `GET /api/openapi.json`: this deployment's OpenAPI document.
#[utoipa::path(get, path = "/api/openapi.json", operation_id = "getOpenApiDocument", tag = "operations",
    responses((status = 200, description = "This document (OpenAPI 3.1)", body = Object)))]
pub async fn document(json: web::Data<OpenApiJson>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(json.0.clone())
}
