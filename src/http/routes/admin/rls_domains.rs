//! `/admin/api/rls/domains`: the edge limiter's domains ([`DomainStore`]), each the
//! document of one envoyproxy/ratelimit YAML file, as JSON. Unlike the rest of this
//! API the document keeps that format's snake_case names (`rate_limit`,
//! `requests_per_unit`): it is that file's format, so a file and a body are one thing.
//! Versions and `If-Match` work as the policies' do.

use actix_web::http::header::{ETag, EntityTag};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::rules::expected_version;
use crate::edge::{DomainChangeError, DomainDocument, DomainStore};
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::identity::Admin;

/// One domain of the list.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainEntry {
    domain: String,
    /// Bumped by every change; the domain's `ETag`.
    version: i64,
    /// Who changed it last: an admin token's name, or `seed` (its file).
    updated_by: String,
    updated_at: DateTime<Utc>,
}

/// Every stored domain, by name.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Domains {
    domains: Vec<DomainEntry>,
}

/// A PUT's body: a domain's document, checked by the store (which names the field at
/// fault) rather than by `validator`.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct DocumentBody(DomainDocument);

impl validator::Validate for DocumentBody {
    fn validate(&self) -> Result<(), validator::ValidationErrors> {
        Ok(())
    }
}

/// `GET /admin/api/rls/domains`.
#[utoipa::path(get, path = "/admin/api/rls/domains", operation_id = "listRlsDomains", tag = "admin",
    responses((status = 200, description = "Every edge domain with its version", body = Domains)))]
pub async fn list_domains(
    _admin: Admin,
    domains: web::Data<DomainStore>,
) -> Result<HttpResponse, ApiError> {
    let domains = domains
        .list()
        .await?
        .into_iter()
        .map(|d| DomainEntry {
            domain: d.domain,
            version: d.version,
            updated_by: d.updated_by,
            updated_at: d.updated_at,
        })
        .collect();
    Ok(HttpResponse::Ok().json(Domains { domains }))
}

/// `GET /admin/api/rls/domains/{domain}`: the domain's document, its version as the
/// `ETag` (`"3"`) to send back in `If-Match`.
#[utoipa::path(get, path = "/admin/api/rls/domains/{domain}", operation_id = "getRlsDomain", tag = "admin",
    params(("domain" = String, Path, description = "The domain (1-64 characters of A-Z a-z 0-9 _ - .)", pattern = r"^[A-Za-z0-9_.-]{1,64}$")),
    responses(
        (status = 200, description = "The domain's document, envoyproxy/ratelimit's YAML file as JSON: its snake_case names are kept on purpose, it is that file's format", body = DomainDocument,
            headers(("ETag" = String, description = "The version, e.g. `\"3\"`, for `If-Match`"))),
        (status = 400, description = "`VALIDATION_FAILED`: `domain` is no domain's name", body = crate::http::api_error::ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such domain"),
    ))]
pub async fn domain(
    _admin: Admin,
    domain: web::Path<String>,
    domains: web::Data<DomainStore>,
) -> Result<HttpResponse, ApiError> {
    let domain = domain.into_inner();
    crate::edge::domain_document::check_domain(&domain).map_err(invalid)?;
    let stored = domains.get(&domain).await?.ok_or(ApiError::NotFound)?;
    Ok(versioned(StatusCode::OK, stored.version, &stored.document))
}

/// `PUT /admin/api/rls/domains/{domain}`: creates or replaces the domain with the body,
/// the same document as its YAML file (its `domain` the path's), checked, audited and
/// in force on every instance within about half a second. With `If-Match: "<version>"`,
/// refused with 409 `VERSION_CONFLICT` (naming the current version) unless the domain is
/// still at that version, and with 404 `NOT_FOUND` if it is no longer stored.
#[utoipa::path(put, path = "/admin/api/rls/domains/{domain}", operation_id = "putRlsDomain", tag = "admin",
    params(
        ("domain" = String, Path, description = "The domain", pattern = r"^[A-Za-z0-9_.-]{1,64}$"),
        ("If-Match" = Option<String>, Header, description = "The version the edit was made from, e.g. `\"3\"`, or `*`"),
    ),
    request_body(content = DomainDocument, description = "The domain's envoyproxy/ratelimit YAML file as JSON, with our `algorithm` and `fail_mode`. Its snake_case names (`rate_limit`, `requests_per_unit`, `shadow_mode`) are kept on purpose: it is that file's format, not this API's camelCase"),
    responses(
        (status = 200, description = "Replaced; the document as stored", body = DomainDocument,
            headers(("ETag" = String, description = "The new version"))),
        (status = 201, description = "Created (version 1)", body = DomainDocument,
            headers(("ETag" = String, description = "The new version"))),
        (status = 400, description = "`VALIDATION_FAILED`: `field` names the document's field at fault (`domain` when it is not the path's, `descriptors[0].rate_limit.unit`), or there are 1 000 domains already"),
        (status = 404, description = "`NOT_FOUND`: `If-Match` names a version of a domain no longer stored"),
        (status = 409, description = "`VERSION_CONFLICT`: changed by someone else; `currentVersion` says to what", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn put_domain(
    admin: Admin,
    req: HttpRequest,
    domain: web::Path<String>,
    body: JsonBody<DocumentBody>,
    domains: web::Data<DomainStore>,
) -> Result<HttpResponse, ApiError> {
    let expected = expected_version(&req, None)?;
    let (stored, created) = domains
        .put(&domain, &admin.name, &body.0 .0, expected)
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(versioned(status, stored.version, &stored.document))
}

/// `DELETE /admin/api/rls/domains/{domain}`: audited, and out of force on every instance
/// within about half a second; `If-Match` as for a PUT.
#[utoipa::path(delete, path = "/admin/api/rls/domains/{domain}", operation_id = "deleteRlsDomain", tag = "admin",
    params(
        ("domain" = String, Path, description = "The domain", pattern = r"^[A-Za-z0-9_.-]{1,64}$"),
        ("If-Match" = Option<String>, Header, description = "The version the deletion was decided on, e.g. `\"3\"`, or `*`"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`VALIDATION_FAILED`: `domain` is no domain's name, or `If-Match` is malformed"),
        (status = 404, description = "`NOT_FOUND`: no such domain"),
        (status = 409, description = "`VERSION_CONFLICT`: changed by someone else; `currentVersion` says to what", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn delete_domain(
    admin: Admin,
    req: HttpRequest,
    domain: web::Path<String>,
    domains: web::Data<DomainStore>,
) -> Result<HttpResponse, ApiError> {
    let expected = expected_version(&req, None)?;
    domains.delete(&domain, &admin.name, expected).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// A document with its version as the `ETag`.
fn versioned(status: StatusCode, version: i64, document: &DomainDocument) -> HttpResponse {
    HttpResponse::build(status)
        .insert_header(ETag(EntityTag::new_strong(version.to_string())))
        .json(document)
}

fn invalid(error: crate::edge::DocumentError) -> ApiError {
    ApiError::from(DomainChangeError::Invalid(error))
}
