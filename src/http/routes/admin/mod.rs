//! `/admin/api/…`: what operators run the sale with. Every handler takes [`Admin`], so
//! every route answers 401 without a valid admin token, before reading a body.
//!
//! Here: items, orders and the live counters; [`rules`]: the rate-limit policies, their
//! edits and audit; [`history`]: the per-minute history and the report per sale;
//! [`mod@offenders`]: the top offenders and the operator's blocks; [`rls_domains`]: the
//! edge limiter's domains.

mod csv_export;
pub mod history;
pub mod item_changes;
pub mod offenders;
pub mod orders_export;
pub mod queue_settings;
pub mod rls_domains;
pub mod rules;

pub use history::{history, item_report, refusal_samples};
pub use item_changes::{archive_item, edit_item, end_item, item_audit, list_items};
pub use offenders::{create_block, delete_block, list_blocks, offenders};
pub use orders_export::orders_csv;
pub use queue_settings::{update_waiting_room, waiting_room};
pub use rls_domains::{delete_domain, domain, list_domains, put_domain};
pub use rules::{audit, policies, policy, update_policy};

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use validator::Validate;

use super::items::{item_id, ItemBody, ItemList};
use super::orders::OrderBody;
use crate::domain::UserId;
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::http::QueryParams;
use crate::identity::Admin;
use crate::sale::item::{ItemId, NewItem};
use crate::sale::records::{OrderFilter, OrderLine};
use crate::sale::room::{RoomConfig, WaitingRoom};
use crate::sale::{Items, Orders};
use crate::stats::series::Series;
use crate::stats::{LiveStats, MAX_SERIES_SECS};
use crate::vocabulary::{OrderState, Outcome};

/// The operator a token belongs to.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Operator {
    name: String,
}

/// `GET /admin/api/me`: checks a token (the dashboard's sign-in).
#[utoipa::path(get, path = "/admin/api/me", operation_id = "getOperator", tag = "admin",
    responses((status = 200, description = "The token's operator", body = Operator)))]
pub async fn me(admin: Admin) -> HttpResponse {
    HttpResponse::Ok().json(Operator { name: admin.name })
}

/// The body of `POST /admin/api/items`.
#[derive(Debug, Deserialize, Validate, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateItemRequest {
    #[schema(example = "Laptop", min_length = 1, max_length = 200)]
    name: String,
    #[schema(minimum = 0, maximum = 100_000_000_000.0)]
    price_cents: i64,
    #[schema(minimum = 1, maximum = 10_000_000)]
    stock: i64,
    starts_at: DateTime<Utc>,
    /// After `startsAt`.
    ends_at: DateTime<Utc>,
    /// The item's waiting room, made with it: the fields of `PUT …/waiting-room`, over
    /// the defaults (off unless `enabled`). A field out of bounds is named
    /// `waitingRoom.<field>`, and nothing is created.
    waiting_room: Option<queue_settings::RoomRequest>,
}

/// `POST /admin/api/items`.
#[utoipa::path(post, path = "/admin/api/items", operation_id = "createItem", tag = "admin", request_body = CreateItemRequest,
    responses(
        (status = 201, description = "The item, on sale from `startsAt` (through its waiting room when `waitingRoom.enabled`)", body = crate::http::routes::items::ItemBody),
        (status = 400, description = "`VALIDATION_FAILED` with `field` (`waitingRoom.admitPerSecond`, …): nothing created", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn create_item(
    admin: Admin,
    body: JsonBody<CreateItemRequest>,
    items: web::Data<Items>,
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
    let room = request
        .waiting_room
        .map(|room| {
            let edit = room.edit()?;
            RoomConfig::default().edited(&edit, new.starts_at)
        })
        .transpose()
        .map_err(|e| ApiError::validation(format!("waitingRoom.{}", e.field()), e.to_string()))?
        // The defaults are what an item without a room has: nothing to store or record.
        .filter(|room| *room != RoomConfig::default());
    let (item, room) = items.create(new, room.as_ref(), &admin.name).await?;
    tracing::info!(admin = %admin.name, item.id = %item.id, room.on = room.is_some_and(|r| r.enabled), "admin created an item");
    Ok(HttpResponse::Created().json(ItemBody::new(&item, i64::from(item.remaining_stock))))
}

/// `POST /admin/api/items/{id}/pause` and `…/resume`.
#[utoipa::path(post, path = "/admin/api/items/{id}/pause", operation_id = "pauseItem", tag = "admin",
    params(("id" = i64, Path, description = "The item")),
    responses(
        (status = 200, description = "The item, paused: purchases answer `SALE_PAUSED`", body = crate::http::routes::items::ItemBody),
        (status = 404, description = "`ITEM_NOT_FOUND`: no such item"),
    ))]
pub async fn pause(
    admin: Admin,
    id: web::Path<i64>,
    items: web::Data<Items>,
) -> Result<HttpResponse, ApiError> {
    set_paused(admin, id.into_inner(), true, &items).await
}

/// `POST /admin/api/items/{id}/resume`: the sale goes on.
#[utoipa::path(post, path = "/admin/api/items/{id}/resume", operation_id = "resumeItem", tag = "admin",
    params(("id" = i64, Path, description = "The item")),
    responses(
        (status = 200, description = "The item, on sale again", body = crate::http::routes::items::ItemBody),
        (status = 404, description = "`ITEM_NOT_FOUND`: no such item"),
    ))]
pub async fn resume(
    admin: Admin,
    id: web::Path<i64>,
    items: web::Data<Items>,
) -> Result<HttpResponse, ApiError> {
    set_paused(admin, id.into_inner(), false, &items).await
}

async fn set_paused(
    admin: Admin,
    id: i64,
    paused: bool,
    items: &Items,
) -> Result<HttpResponse, ApiError> {
    let id = item_id(id)?;
    let item = items.set_paused(id, paused, &admin.name).await?;
    tracing::info!(admin = %admin.name, item.id = %item.id, paused, "admin changed a sale");
    let remaining = items
        .live_stock(item.id)
        .await
        .unwrap_or(i64::from(item.remaining_stock));
    Ok(HttpResponse::Ok().json(ItemBody::new(&item, remaining)))
}

/// The filters and page of `GET /admin/api/orders` and its CSV export.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct OrdersQuery {
    /// One order, by id.
    order: Option<uuid::Uuid>,
    item: Option<i64>,
    user: Option<i64>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    /// Only orders in this state: `pending_payment`, `paid`, `cancelled`, `expired`.
    state: Option<String>,
    page: Option<i64>,
    per_page: Option<i64>,
}

/// The last page `GET /admin/api/orders` serves: 20 million orders at 200 a page.
const MAX_PAGE: i64 = 100_000;

/// `GET /admin/api/orders?order=&item=&user=&from=&to=&state=&page=&perPage=`: newest
/// first, each with its item's name, its amount and when it was paid.
#[utoipa::path(get, path = "/admin/api/orders", operation_id = "listOrders", tag = "admin", params(OrdersQuery),
    responses(
        (status = 200, description = "One page of orders, newest first", body = OrderPage),
        (status = 400, description = "`VALIDATION_FAILED`: `field` names the query parameter", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn orders(
    _admin: Admin,
    query: QueryParams<OrdersQuery>,
    orders: web::Data<Orders>,
) -> Result<HttpResponse, ApiError> {
    let filter = order_filter(query.into_inner())?;
    let (page, per_page) = (filter.page, filter.per_page);
    let (found, total) = orders.search(&filter).await?;
    Ok(HttpResponse::Ok().json(OrderPage {
        orders: found.iter().map(AdminOrderBody::from).collect(),
        page,
        per_page,
        total,
    }))
}

/// The filter an orders query asks for, each parameter checked and named when wrong.
pub(super) fn order_filter(q: OrdersQuery) -> Result<OrderFilter, ApiError> {
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
    Ok(OrderFilter {
        order: q.order,
        item: q
            .item
            .map(|i| ItemId::try_from(i).map_err(|e| ApiError::validation("item", e.to_string())))
            .transpose()?,
        user: q
            .user
            .map(|u| UserId::try_from(u).map_err(|e| ApiError::validation("user", e.to_string())))
            .transpose()?,
        from: q.from.map(|t| storable("from", t)).transpose()?,
        to: q.to.map(|t| storable("to", t)).transpose()?,
        state: q
            .state
            .map(|s| {
                s.parse::<OrderState>().map_err(|_| {
                    ApiError::validation(
                        "state",
                        "state must be one of: pending_payment, paid, cancelled, expired",
                    )
                })
            })
            .transpose()?,
        page,
        per_page,
    })
}

/// An order as operators see it: the shopper's fields plus the item's name, the
/// amount and the payment time.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdminOrderBody {
    #[serde(flatten)]
    order: OrderBody,
    item_name: String,
    amount_cents: i64,
    paid_at: Option<DateTime<Utc>>,
}

impl From<&OrderLine> for AdminOrderBody {
    fn from(line: &OrderLine) -> Self {
        Self {
            order: OrderBody::from(&line.order),
            item_name: line.item_name.clone(),
            amount_cents: line.amount_cents,
            paid_at: line.paid_at,
        }
    }
}

/// `instant` from the query's `field`, if Postgres can store it (see `domain::is_storable`).
fn storable(field: &str, instant: DateTime<Utc>) -> Result<DateTime<Utc>, ApiError> {
    if crate::domain::is_storable(instant) {
        Ok(instant)
    } else {
        Err(ApiError::validation(
            field,
            format!("{field} must be {}", crate::domain::STORABLE_RANGE),
        ))
    }
}

/// One page of orders.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderPage {
    orders: Vec<AdminOrderBody>,
    page: i64,
    per_page: i64,
    /// Orders matching the filter, over all pages.
    total: i64,
}

/// The query of `GET /admin/api/stats`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// Seconds to sum over, 1 to 3600 (clamped); 60 when absent.
    window: Option<u64>,
}

/// `GET /admin/api/stats?window=60`: the last `window` seconds summed over every
/// instance, plus live stock.
#[utoipa::path(get, path = "/admin/api/stats", operation_id = "getStats", tag = "admin", params(StatsQuery),
    responses((status = 200, description = "Counters summed over every instance, and live stock", body = Stats)))]
pub async fn stats(
    _admin: Admin,
    query: QueryParams<StatsQuery>,
    live: web::Data<LiveStats>,
    items: web::Data<Items>,
    orders: web::Data<Orders>,
    room: web::Data<WaitingRoom>,
) -> Result<HttpResponse, ApiError> {
    let window = query
        .window
        .unwrap_or(60)
        .clamp(1, crate::stats::MAX_WINDOW_SECS);
    let sums = live.sums(window).await?;
    let listing = items.listing().await;
    let ids: Vec<_> = listing.iter().map(|(item, _)| item.id).collect();
    let outcome = |o: Outcome| sums.outcomes.get(o.label()).copied().unwrap_or(0);
    Ok(HttpResponse::Ok().json(Stats {
        window_seconds: window,
        // Every admitted purchase passes every rule once: one rule's count is theirs.
        admitted: sums.passes.values().copied().max().unwrap_or(0),
        sold_out: outcome(Outcome::SoldOut),
        already_purchased: outcome(Outcome::AlreadyPurchased),
        errors: [
            Outcome::OrderFailed,
            Outcome::LimiterUnavailable,
            Outcome::Overloaded,
            Outcome::OrdersUnavailable,
        ]
        .into_iter()
        .map(outcome)
        .sum(),
        passes: sums.passes,
        rejections: sums.rejections,
        orders: sums.orders,
        fail_open: sums.fail_open,
        items: ItemList::new(&listing, &room),
        orders_by_state: orders.states_by_item(&ids).await?,
    }))
}

/// The query of `GET /admin/api/stats/series`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SeriesQuery {
    /// Seconds to chart, 1 to 300 (clamped); 300 when absent.
    window: Option<u64>,
}

/// `GET /admin/api/stats/series?window=300`: the last `window` whole seconds, one point
/// per second, summed over every instance: the dashboard's charts.
#[utoipa::path(get, path = "/admin/api/stats/series", operation_id = "getStatsSeries", tag = "admin", params(SeriesQuery),
    responses((status = 200, description = "Per-second purchases by outcome, limiter refusals by who answered them, and stock per item", body = Series)))]
pub async fn stats_series(
    _admin: Admin,
    query: QueryParams<SeriesQuery>,
    live: web::Data<LiveStats>,
) -> Result<HttpResponse, ApiError> {
    let window = query.window.unwrap_or(MAX_SERIES_SECS);
    Ok(HttpResponse::Ok().json(live.series(window).await?))
}

/// The dashboard's counters over the window, summed over every instance.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Stats<'a> {
    window_seconds: u64,
    /// Purchases the limiter let through, each counted once.
    admitted: i64,
    /// Purchases answered `SOLD_OUT` (from memory or after the limiter).
    sold_out: i64,
    /// Purchases answered `ALREADY_PURCHASED`.
    already_purchased: i64,
    /// Purchases answered `ORDER_FAILED`, `LIMITER_UNAVAILABLE`, `OVERLOADED` or
    /// `ORDERS_UNAVAILABLE`.
    errors: i64,
    /// Admissions of the sale's policy, by dimension (rule name): every admitted
    /// purchase counts once in each (see `admitted`).
    passes: std::collections::BTreeMap<String, i64>,
    /// Its refusals, by the dimension that refused.
    rejections: std::collections::BTreeMap<String, i64>,
    orders: i64,
    /// Requests let through because the limiter could not ask Redis, every policy.
    fail_open: i64,
    #[serde(flatten)]
    items: ItemList<'a>,
    /// Per item listed: its orders in Postgres by state (`pending_payment`, `paid`,
    /// `cancelled`, `expired`).
    #[schema(value_type = std::collections::BTreeMap<String, std::collections::BTreeMap<String, i64>>)]
    orders_by_state: std::collections::BTreeMap<i64, std::collections::BTreeMap<&'static str, i64>>,
}
