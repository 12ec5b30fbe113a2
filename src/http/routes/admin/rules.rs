//! `/admin/api/policies` and `/admin/api/audit`: the rate-limit policies as the dashboard
//! shows them, their edits (parsed here, made by [`RuleStore::change`]) and the audit.

use actix_web::http::header::{ETag, EntityTag, IF_MATCH};
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::http::ApiError;
use crate::http::JsonBody;
use crate::http::QueryParams;
use crate::identity::Admin;
use crate::limiter::policy::{
    Algorithm, FailMode, KeySource, PolicyConfig, Scope, DEFAULT_MAX_DELAY_MS,
};
use crate::rules::edit::PolicyEdit;
use crate::rules::{AuditEntry, RuleStore, StoredPolicy};

/// A policy as the dashboard shows and edits it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Policy)]
pub struct PolicyView {
    name: String,
    /// Bumped by every change; absent from the audit's before/after pictures.
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<i64>,
    algorithm: Algorithm,
    fail_mode: FailMode,
    enabled: bool,
    scope: Scope,
    rules: Vec<RuleView>,
}

/// A rule as the dashboard shows and edits it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Rule)]
pub struct RuleView {
    name: String,
    key: KeySource,
    window_ms: u64,
    threshold: u64,
    message: String,
    /// Counts what it would refuse, never refuses.
    shadow: bool,
    /// The leaky bucket's longest wait for a departure slot.
    max_delay_ms: u64,
}

impl PolicyView {
    fn new(name: &str, config: &PolicyConfig, version: Option<i64>) -> Self {
        Self {
            name: name.to_string(),
            version,
            algorithm: config.algorithm,
            fail_mode: config.fail_mode,
            enabled: config.enabled,
            scope: config.scope,
            rules: config
                .rules
                .iter()
                .map(|r| RuleView {
                    name: r.name.clone(),
                    key: r.key.clone(),
                    window_ms: r.window_ms,
                    threshold: r.threshold,
                    message: r.message.clone(),
                    shadow: r.shadow,
                    max_delay_ms: r.max_delay_ms.unwrap_or(DEFAULT_MAX_DELAY_MS),
                })
                .collect(),
        }
    }
}

/// Every policy in force.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Policies {
    policies: Vec<PolicyView>,
}

/// `GET /admin/api/policies`.
#[utoipa::path(get, path = "/admin/api/policies", operation_id = "listPolicies", tag = "admin",
    responses((status = 200, description = "Every policy with its version", body = Policies)))]
pub async fn policies(
    _admin: Admin,
    rules: web::Data<RuleStore>,
) -> Result<HttpResponse, ApiError> {
    let stored = rules.load().await?;
    let policies: Vec<_> = stored
        .iter()
        .map(|(name, stored)| PolicyView::new(name, &stored.config, Some(stored.version)))
        .collect();
    Ok(HttpResponse::Ok().json(Policies { policies }))
}

/// `GET /admin/api/policies/{name}`: one policy, its version also as the `ETag` (e.g.
/// `"3"`) to send back in `If-Match` with an edit.
#[utoipa::path(get, path = "/admin/api/policies/{name}", operation_id = "getPolicy", tag = "admin",
    params(("name" = String, Path, description = "The policy (`seckill`, `limited`, …)")),
    responses(
        (status = 200, description = "The policy", body = PolicyView,
            headers(("ETag" = String, description = "The version, e.g. `\"3\"`, for `If-Match`"))),
        (status = 400, description = "`VALIDATION_FAILED`: `name` is no policy name (1-32 characters of a-z 0-9 _ -)", body = crate::http::api_error::ErrorBody),
        (status = 404, description = "`NOT_FOUND`: no such policy"),
    ))]
pub async fn policy(
    _admin: Admin,
    name: web::Path<String>,
    rules: web::Data<RuleStore>,
) -> Result<HttpResponse, ApiError> {
    let name = policy_name("name", name.into_inner())?;
    let stored = rules.get(&name).await?.ok_or(ApiError::NotFound)?;
    Ok(versioned(&name, &stored))
}

/// A policy name from the request's `field`, checked before it reaches a query: a
/// name no policy can have (`%00`, 33 characters) is a 400, not a lookup.
fn policy_name(field: &str, name: String) -> Result<String, ApiError> {
    if crate::limiter::policy::is_name(&name) {
        Ok(name)
    } else {
        Err(ApiError::validation(
            field,
            format!("{field} must be a policy name: 1-32 characters of a-z 0-9 _ -"),
        ))
    }
}

/// A policy with its version in the body and in the `ETag`.
fn versioned(name: &str, stored: &StoredPolicy) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(ETag(EntityTag::new_strong(stored.version.to_string())))
        .json(PolicyView::new(name, &stored.config, Some(stored.version)))
}

/// `PUT /admin/api/policies/{name}`: validated like settings, audited, and in force on
/// every instance within about half a second. With `If-Match: "<version>"` or a
/// `version` in the body, refused with 409 `VERSION_CONFLICT` (naming the current
/// version) unless the policy is still at that version; without either, applied to
/// whatever is stored.
#[utoipa::path(put, path = "/admin/api/policies/{name}", operation_id = "updatePolicy", tag = "admin",
    params(
        ("name" = String, Path, description = "The policy"),
        ("If-Match" = Option<String>, Header, description = "The version the edit was made from, e.g. `\"3\"`, or `*`"),
    ),
    request_body = crate::rules::edit::PolicyEdit,
    responses(
        (status = 200, description = "The policy as changed, in force everywhere within about half a second", body = PolicyView,
            headers(("ETag" = String, description = "The new version"))),
        (status = 400, description = "`VALIDATION_FAILED`: `field` names the part of the edit at fault"),
        (status = 404, description = "`NOT_FOUND`: no such policy"),
        (status = 409, description = "`VERSION_CONFLICT`: changed by someone else; `currentVersion` says to what", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn update_policy(
    admin: Admin,
    req: HttpRequest,
    name: web::Path<String>,
    body: JsonBody<PolicyEdit>,
    rules: web::Data<RuleStore>,
) -> Result<HttpResponse, ApiError> {
    let name = policy_name("name", name.into_inner())?;
    let mut edit = body.0;
    edit.version = expected_version(&req, edit.version)?;
    let stored = rules.change(&name, &admin.name, &edit).await?;
    Ok(versioned(&name, &stored))
}

/// The version an edit was made from: `If-Match` (one of our entity tags, `"3"`; `*`
/// means any) and the body's `version`, which must agree when both are sent.
pub(super) fn expected_version(
    req: &HttpRequest,
    body: Option<i64>,
) -> Result<Option<i64>, ApiError> {
    if body.is_some_and(|version| version < 1) {
        return Err(ApiError::validation(
            "version",
            "version must be a positive integer",
        ));
    }
    let Some(value) = req.headers().get(IF_MATCH) else {
        return Ok(body);
    };
    let header = value
        .to_str()
        .ok()
        .map(str::trim)
        .filter(|v| *v != "*")
        .map(|v| {
            v.strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<i64>().ok())
                .filter(|version| *version >= 1)
        });
    match (header, body) {
        (Some(None), _) => Err(ApiError::validation(
            "If-Match",
            r#"If-Match must be one version's entity tag, e.g. "3", or *"#,
        )),
        (Some(Some(tag)), Some(version)) if tag != version => Err(ApiError::validation(
            "version",
            "version and If-Match name different versions",
        )),
        (Some(Some(tag)), _) => Ok(Some(tag)),
        (None, body) => Ok(body),
    }
}

/// The query of `GET /admin/api/audit`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this policy's changes.
    policy: Option<String>,
}

/// One change of a policy.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = AuditEntry)]
pub struct AuditView {
    policy: String,
    changed_by: String,
    changed_at: DateTime<Utc>,
    old: PolicyView,
    new: PolicyView,
}

/// Policy changes, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Audit {
    entries: Vec<AuditView>,
}

impl From<AuditEntry> for AuditView {
    fn from(entry: AuditEntry) -> Self {
        Self {
            old: PolicyView::new(&entry.policy, &entry.old, None),
            new: PolicyView::new(&entry.policy, &entry.new, None),
            policy: entry.policy,
            changed_by: entry.changed_by,
            changed_at: entry.changed_at,
        }
    }
}

/// `GET /admin/api/audit?policy=`: the latest 100 rule changes.
#[utoipa::path(get, path = "/admin/api/audit", operation_id = "listPolicyAudit", tag = "admin", params(AuditQuery),
    responses((status = 200, description = "The latest 100 policy changes, newest first", body = Audit)))]
pub async fn audit(
    _admin: Admin,
    query: QueryParams<AuditQuery>,
    rules: web::Data<RuleStore>,
) -> Result<HttpResponse, ApiError> {
    let policy = query
        .into_inner()
        .policy
        .map(|p| policy_name("policy", p))
        .transpose()?;
    let entries = rules.audit(policy.as_deref(), 100).await?;
    let entries: Vec<AuditView> = entries.into_iter().map(AuditView::from).collect();
    Ok(HttpResponse::Ok().json(Audit { entries }))
}
