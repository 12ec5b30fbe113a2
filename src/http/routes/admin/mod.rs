//! `/admin/api/…`: what operators run the sale with. Every handler takes [`Admin`], so
//! every route answers 401 without a valid admin token, before reading a body.
//!
//! Here: items, orders and the live counters; [`rules`]: the rate-limit policies, their
//! edits and audit.

mod rules;

pub use rules::{audit, policies, policy, update_policy};

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use validator::Validate;

use super::items::ItemBody;
use super::seckill::OrderBody;
use crate::admin::stats::LiveStats;
use crate::domain::UserId;
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::identity::Admin;
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
    let listing = sale.listing().await;
    let items: Vec<_> = listing
        .iter()
        .map(|(item, remaining)| ItemBody::new(item, *remaining))
        .collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({
        "windowSeconds": window,
        "passes": sums.passes,
        "rejections": sums.rejections,
        "orders": sums.orders,
        "failOpen": sums.fail_open,
        "items": items,
    })))
}
