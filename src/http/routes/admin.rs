//! `/admin/api/…`: what operators run the sale with. Every handler takes [`Admin`], so
//! every route answers 401 without a valid admin token, before reading a body.

use std::collections::BTreeMap;

use actix_web::http::header::{ETag, EntityTag, IF_MATCH};
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use validator::Validate;

use super::items::ItemBody;
use super::seckill::OrderBody;
use crate::admin::rules::{AuditEntry, RuleChangeError, RuleStore, StoredPolicy};
use crate::admin::stats::LiveStats;
use crate::domain::UserId;
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::identity::Admin;
use crate::limiter::policy::{
    Algorithm, FailMode, KeySource, PolicyConfig, PolicyError, RuleConfig,
};
use crate::sale::item::{ItemId, NewItem};
use crate::sale::postgres::OrderFilter;
use crate::sale::{Sale, SaleError};

/// `GET /admin/api/me`: checks a token (the dashboard's sign-in).
pub async fn me(admin: Admin) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "name": admin.name }))
}

#[derive(Debug, Deserialize, Validate)]
#[serde(rename_all = "camelCase")]
pub struct CreateItemRequest {
    name: String,
    price_cents: i64,
    stock: i64,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
}

/// `POST /admin/api/items`.
pub async fn create_item(
    admin: Admin,
    body: JsonBody<CreateItemRequest>,
    sale: web::Data<Sale>,
) -> Result<HttpResponse, ApiError> {
    let request = body.0;
    let new = NewItem::parse(
        &request.name,
        request.price_cents,
        request.stock,
        request.starts_at,
        request.ends_at,
    )
    .map_err(|e| ApiError::validation(e.field(), e.to_string()))?;
    let item = sale.create_item(new).await?;
    tracing::info!(admin = %admin.name, item.id = %item.id, "admin created an item");
    Ok(HttpResponse::Created().json(ItemBody::new(&item, i64::from(item.remaining_stock))))
}

/// `POST /admin/api/items/{id}/pause` and `…/resume`.
pub async fn pause(
    admin: Admin,
    id: web::Path<i64>,
    sale: web::Data<Sale>,
) -> Result<HttpResponse, ApiError> {
    set_paused(admin, id.into_inner(), true, &sale).await
}

pub async fn resume(
    admin: Admin,
    id: web::Path<i64>,
    sale: web::Data<Sale>,
) -> Result<HttpResponse, ApiError> {
    set_paused(admin, id.into_inner(), false, &sale).await
}

async fn set_paused(
    admin: Admin,
    id: i64,
    paused: bool,
    sale: &Sale,
) -> Result<HttpResponse, ApiError> {
    let id = ItemId::try_from(id).map_err(|_| SaleError::ItemNotFound)?;
    let item = sale
        .set_paused(id, paused)
        .await?
        .ok_or(SaleError::ItemNotFound)?;
    tracing::info!(admin = %admin.name, item.id = %item.id, paused, "admin changed a sale");
    let remaining = sale
        .live_stock(item.id)
        .await
        .unwrap_or(i64::from(item.remaining_stock));
    Ok(HttpResponse::Ok().json(ItemBody::new(&item, remaining)))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrdersQuery {
    item: Option<i64>,
    user: Option<i64>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    page: Option<i64>,
    per_page: Option<i64>,
}

/// The last page `GET /admin/api/orders` serves: 20 million orders at 200 a page.
const MAX_PAGE: i64 = 100_000;

/// `GET /admin/api/orders?item=&user=&from=&to=&page=&perPage=`: newest first.
pub async fn orders(
    _admin: Admin,
    query: web::Query<OrdersQuery>,
    sale: web::Data<Sale>,
) -> Result<HttpResponse, ApiError> {
    let q = query.into_inner();
    let page = q.page.unwrap_or(1);
    let per_page = q.per_page.unwrap_or(50);
    // Bounded so that the offset, (page - 1) × perPage, always fits: an unbounded page
    // overflowed it (a panic in debug builds, a negative OFFSET and a 500 in release).
    if !(1..=MAX_PAGE).contains(&page) {
        return Err(ApiError::validation(
            "page",
            format!("page must be between 1 and {MAX_PAGE}"),
        ));
    }
    if !(1..=200).contains(&per_page) {
        return Err(ApiError::validation(
            "perPage",
            "perPage must be between 1 and 200",
        ));
    }
    let filter = OrderFilter {
        item: q
            .item
            .map(|i| ItemId::try_from(i).map_err(|e| ApiError::validation("item", e.to_string())))
            .transpose()?,
        user: q
            .user
            .map(|u| UserId::try_from(u).map_err(|e| ApiError::validation("user", e.to_string())))
            .transpose()?,
        from: q.from,
        to: q.to,
        page,
        per_page,
    };
    let (orders, total) = sale.search_orders(&filter).await?;
    let orders: Vec<OrderBody> = orders.iter().map(OrderBody::from).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "orders": orders, "page": page, "perPage": per_page, "total": total,
    })))
}

#[derive(Debug, Deserialize)]
pub struct StatsQuery {
    window: Option<u64>,
}

/// `GET /admin/api/stats?window=60`: the last `window` seconds summed over every
/// instance, plus live stock.
pub async fn stats(
    _admin: Admin,
    query: web::Query<StatsQuery>,
    live: web::Data<LiveStats>,
    sale: web::Data<Sale>,
) -> Result<HttpResponse, ApiError> {
    let window = query
        .window
        .unwrap_or(60)
        .clamp(1, crate::admin::stats::MAX_WINDOW_SECS);
    let sums = live.sums(window).await?;
    let (mut passes, mut rejections) = (BTreeMap::new(), BTreeMap::new());
    for (field, value) in &sums {
        if let Some(dimension) = field.strip_prefix("pass:") {
            passes.insert(dimension.to_string(), *value);
        } else if let Some(dimension) = field.strip_prefix("reject:") {
            rejections.insert(dimension.to_string(), *value);
        }
    }
    let listing = sale.listing().await;
    let items: Vec<_> = listing
        .iter()
        .map(|(item, remaining)| ItemBody::new(item, *remaining))
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "windowSeconds": window,
        "passes": passes,
        "rejections": rejections,
        "orders": sums.get("orders").copied().unwrap_or(0),
        "failOpen": sums.get("fail_open").copied().unwrap_or(0),
        "items": items,
    })))
}

/// A policy as the dashboard shows and edits it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyView {
    name: String,
    /// Bumped by every change; absent from the audit's before/after pictures.
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<i64>,
    algorithm: Algorithm,
    fail_mode: FailMode,
    enabled: bool,
    rules: Vec<RuleView>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleView {
    name: String,
    key: KeySource,
    window_ms: u64,
    threshold: u64,
    message: String,
}

impl PolicyView {
    fn new(name: &str, config: &PolicyConfig, version: Option<i64>) -> Self {
        Self {
            name: name.to_string(),
            version,
            algorithm: config.algorithm,
            fail_mode: config.fail_mode,
            enabled: config.enabled,
            rules: config
                .rules
                .iter()
                .map(|r| RuleView {
                    name: r.name.clone(),
                    key: r.key.clone(),
                    window_ms: r.window_ms,
                    threshold: r.threshold,
                    message: r.message.clone(),
                })
                .collect(),
        }
    }
}

/// `GET /admin/api/policies`.
pub async fn policies(
    _admin: Admin,
    rules: web::Data<RuleStore>,
) -> Result<HttpResponse, ApiError> {
    let stored = rules.load().await?;
    let policies: Vec<_> = stored
        .iter()
        .map(|(name, stored)| PolicyView::new(name, &stored.config, Some(stored.version)))
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "policies": policies })))
}

/// `GET /admin/api/policies/{name}`: one policy, its version also as the `ETag` (e.g.
/// `"3"`) to send back in `If-Match` with an edit.
pub async fn policy(
    _admin: Admin,
    name: web::Path<String>,
    rules: web::Data<RuleStore>,
) -> Result<HttpResponse, ApiError> {
    let name = name.into_inner();
    let stored = rules.get(&name).await?.ok_or(ApiError::NotFound)?;
    Ok(versioned(&name, &stored))
}

/// A policy with its version in the body and in the `ETag`.
fn versioned(name: &str, stored: &StoredPolicy) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(ETag(EntityTag::new_strong(stored.version.to_string())))
        .json(PolicyView::new(name, &stored.config, Some(stored.version)))
}

/// What may change: the algorithm, and each rule's window, threshold and message. Rules
/// are named; their key sources stay as configured. `version`, like `If-Match`, makes
/// the change conditional on the version it was made from.
#[derive(Debug, Deserialize, Validate)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyChange {
    version: Option<i64>,
    algorithm: Option<Algorithm>,
    enabled: Option<bool>,
    rules: Vec<RuleChange>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleChange {
    name: String,
    window_ms: Option<u64>,
    threshold: Option<u64>,
    message: Option<String>,
}

impl PolicyChange {
    /// The stored policy with this change merged in (named rules only).
    fn apply(
        &self,
        policy: &str,
        mut config: PolicyConfig,
    ) -> Result<PolicyConfig, RuleChangeError> {
        if let Some(algorithm) = self.algorithm {
            config.algorithm = algorithm;
        }
        if let Some(enabled) = self.enabled {
            config.enabled = enabled;
        }
        for (index, rc) in self.rules.iter().enumerate() {
            let rule: &mut RuleConfig = config
                .rules
                .iter_mut()
                .find(|r| r.name == rc.name)
                .ok_or_else(|| RuleChangeError::UnknownRule {
                    policy: policy.to_string(),
                    rule: rc.name.clone(),
                    index,
                })?;
            if let Some(window_ms) = rc.window_ms {
                rule.window_ms = window_ms;
                rule.refill_ms = None; // the token bucket follows the window
            }
            if let Some(threshold) = rc.threshold {
                rule.threshold = threshold;
                rule.capacity = None;
                rule.refill_tokens = None;
            }
            if let Some(message) = &rc.message {
                rule.message = message.clone();
            }
        }
        Ok(config)
    }
}

/// `PUT /admin/api/policies/{name}`: validated like settings, audited, and in force on
/// every instance within about half a second. With `If-Match: "<version>"` or a
/// `version` in the body, refused with 409 `VERSION_CONFLICT` (naming the current
/// version) unless the policy is still at that version; without either, applied to
/// whatever is stored.
pub async fn update_policy(
    admin: Admin,
    req: HttpRequest,
    name: web::Path<String>,
    body: JsonBody<PolicyChange>,
    rules: web::Data<RuleStore>,
) -> Result<HttpResponse, ApiError> {
    let name = name.into_inner();
    let change = body.0;
    let expected = expected_version(&req, change.version)?;
    let stored = rules
        .change(&name, &admin.name, expected, |config| {
            change.apply(&name, config)
        })
        .await
        .map_err(|e| match e {
            RuleChangeError::UnknownPolicy(_) => ApiError::NotFound,
            RuleChangeError::VersionConflict { current, .. } => {
                ApiError::VersionConflict { current }
            }
            RuleChangeError::UnknownRule { index, .. } => {
                ApiError::validation(format!("rules[{index}].name"), e.to_string())
            }
            RuleChangeError::Invalid(invalid) => {
                ApiError::validation(invalid_field(&invalid), invalid.to_string())
            }
            RuleChangeError::Store(cause) => ApiError::Internal(cause),
        })?;
    Ok(versioned(&name, &stored))
}

/// The version an edit was made from: `If-Match` (one of our entity tags, `"3"`; `*`
/// means any) and the body's `version`, which must agree when both are sent.
fn expected_version(req: &HttpRequest, body: Option<i64>) -> Result<Option<i64>, ApiError> {
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

/// The request field a policy error points at, in the client's spelling.
fn invalid_field(error: &PolicyError) -> String {
    match error {
        PolicyError::NotPositive { field, .. } | PolicyError::TooLarge { field, .. } => {
            match *field {
                "window_ms" | "refill_ms" => "windowMs".into(),
                _ => "threshold".into(),
            }
        }
        PolicyError::BadMessage(_) => "message".into(),
        _ => "rules".into(),
    }
}

#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    policy: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AuditView {
    policy: String,
    changed_by: String,
    changed_at: DateTime<Utc>,
    old: PolicyView,
    new: PolicyView,
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
pub async fn audit(
    _admin: Admin,
    query: web::Query<AuditQuery>,
    rules: web::Data<RuleStore>,
) -> Result<HttpResponse, ApiError> {
    let entries = rules.audit(query.policy.as_deref(), 100).await?;
    let entries: Vec<AuditView> = entries.into_iter().map(AuditView::from).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "entries": entries })))
}
