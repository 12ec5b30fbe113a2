//! `/admin/api/items…`: an item's life after its creation, as operators run it: the
//! list with what each item sold, edits (stock included), the end, the archive, and the
//! audit of every change.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use validator::Validate;

use crate::http::routes::items::{item_id, ItemBody};
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::http::QueryParams;
use crate::identity::Admin;
use crate::sale::item::ItemEdit;
use crate::sale::records::ItemFigures;
use crate::sale::room::WaitingRoom;
use crate::sale::Items;

/// An item as operators see it: the shop's fields plus what it sold.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdminItemBody<'a> {
    #[serde(flatten)]
    item: ItemBody<'a>,
    archived_at: Option<DateTime<Utc>>,
    /// Live orders: awaiting payment or paid.
    sold: i64,
    /// Orders awaiting payment.
    held: i64,
    /// Paid orders × the price.
    revenue_cents: i64,
    /// When the last unit went (the last live order), once every unit has gone.
    sold_out_at: Option<DateTime<Utc>>,
}

impl<'a> AdminItemBody<'a> {
    fn new(figures: &'a ItemFigures, left: i64, room: &WaitingRoom) -> Self {
        let item = &figures.item;
        Self {
            item: ItemBody::new(item, left).with_waiting_room(room.opens_at(item)),
            archived_at: item.archived_at,
            sold: figures.sold,
            held: figures.held,
            revenue_cents: figures.revenue_cents,
            sold_out_at: figures.sold_out_at,
        }
    }
}

/// The operators' list of items, with what each sold.
#[derive(Serialize, utoipa::ToSchema)]
pub struct AdminItemList<'a> {
    items: Vec<AdminItemBody<'a>>,
}

/// The query of `GET /admin/api/items`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// `true`: archived items too.
    archived: Option<bool>,
}

/// Every item, newest first (at most 500), ended ones included, archived ones only
/// when asked.
#[utoipa::path(get, path = "/admin/api/items", operation_id = "listItems", tag = "admin", params(ListQuery),
    responses((status = 200, description = "The items with what each sold", body = AdminItemList)))]
pub async fn list_items(
    _admin: Admin,
    query: QueryParams<ListQuery>,
    items: web::Data<Items>,
    room: web::Data<WaitingRoom>,
) -> Result<HttpResponse, ApiError> {
    let listed = items
        .with_figures(query.archived.unwrap_or(false), None)
        .await?;
    let body = AdminItemList {
        items: listed
            .iter()
            .map(|(figures, left)| AdminItemBody::new(figures, *left, &room))
            .collect(),
    };
    Ok(HttpResponse::Ok().json(body))
}

/// The one item, as the list shows it.
async fn one(
    items: &Items,
    room: &WaitingRoom,
    id: crate::sale::item::ItemId,
) -> Result<HttpResponse, ApiError> {
    let listed = items.with_figures(true, Some(id)).await?;
    let (figures, left) = listed
        .iter()
        .find(|(f, _)| f.item.id == id)
        .ok_or(crate::sale::SaleError::ItemNotFound)?;
    Ok(HttpResponse::Ok().json(AdminItemBody::new(figures, *left, room)))
}

/// An edit: any of the fields.
#[derive(Debug, Deserialize, Validate, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EditItemRequest {
    #[schema(min_length = 1, max_length = 200)]
    name: Option<String>,
    #[schema(minimum = 0, maximum = 100_000_000_000.0)]
    price_cents: Option<i64>,
    /// After the sale's start.
    ends_at: Option<DateTime<Utc>>,
    /// The new total: raised, or lowered to no less than what is sold or held.
    #[schema(minimum = 1, maximum = 10_000_000)]
    stock: Option<i64>,
}

/// `PATCH /admin/api/items/{id}`: changes an item's name, price, end or stock, audited.
#[utoipa::path(patch, path = "/admin/api/items/{id}", operation_id = "editItem", tag = "admin",
    params(("id" = i64, Path, description = "The item")),
    request_body = EditItemRequest,
    responses(
        (status = 200, description = "The item as stored", body = AdminItemBody),
        (status = 400, description = "`VALIDATION_FAILED` with `field`", body = crate::http::api_error::ErrorBody),
        (status = 404, description = "`ITEM_NOT_FOUND`", body = crate::http::api_error::ErrorBody),
        (status = 409, description = "`STOCK_TOO_LOW` (with `minStock`), `ITEM_ARCHIVED`, `EDIT_IN_PROGRESS` or `ENDED_BY_OPERATOR` (an `endsAt` edit after an operator ended the sale)", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn edit_item(
    admin: Admin,
    id: web::Path<i64>,
    body: JsonBody<EditItemRequest>,
    items: web::Data<Items>,
    room: web::Data<WaitingRoom>,
) -> Result<HttpResponse, ApiError> {
    let id = item_id(id.into_inner())?;
    let item = items
        .catalog()
        .get(id)
        .ok_or(crate::sale::SaleError::ItemNotFound)?;
    let request = body.0;
    let edit = ItemEdit::parse(
        request.name.as_deref(),
        request.price_cents,
        request.ends_at,
        request.stock,
        item.starts_at,
    )
    .map_err(|e| ApiError::validation(e.field(), e.to_string()))?;
    if edit.is_empty() {
        return Err(ApiError::validation(
            "body",
            "name, priceCents, endsAt or stock: at least one",
        ));
    }
    items.edit(id, &edit, &admin.name).await?;
    one(&items, &room, id).await
}

/// `POST /admin/api/items/{id}/end`: ends the sale now, for good.
#[utoipa::path(post, path = "/admin/api/items/{id}/end", operation_id = "endItem", tag = "admin",
    params(("id" = i64, Path, description = "The item")),
    responses(
        (status = 200, description = "The item, its sale over for good: purchases answer `SALE_ENDED` on every instance, and an `endsAt` edit `ENDED_BY_OPERATOR`", body = AdminItemBody),
        (status = 404, description = "`ITEM_NOT_FOUND`", body = crate::http::api_error::ErrorBody),
        (status = 409, description = "`ITEM_ARCHIVED`", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn end_item(
    admin: Admin,
    id: web::Path<i64>,
    items: web::Data<Items>,
    room: web::Data<WaitingRoom>,
) -> Result<HttpResponse, ApiError> {
    let id = item_id(id.into_inner())?;
    items.end(id, false, &admin.name).await?;
    one(&items, &room, id).await
}

/// `POST /admin/api/items/{id}/archive`: archives the item, its sale ended if it was on;
/// its orders stay.
#[utoipa::path(post, path = "/admin/api/items/{id}/archive", operation_id = "archiveItem", tag = "admin",
    params(("id" = i64, Path, description = "The item")),
    responses(
        (status = 200, description = "The item, archived (its sale ended if it was on); its orders stay", body = AdminItemBody),
        (status = 404, description = "`ITEM_NOT_FOUND`", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn archive_item(
    admin: Admin,
    id: web::Path<i64>,
    items: web::Data<Items>,
    room: web::Data<WaitingRoom>,
) -> Result<HttpResponse, ApiError> {
    let id = item_id(id.into_inner())?;
    items.end(id, true, &admin.name).await?;
    one(&items, &room, id).await
}

/// One audited change.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntryBody {
    /// `create`, `edit`, `end`, `archive`, `pause` or `resume` (`ItemAction`).
    action: String,
    changed_by: String,
    changed_at: DateTime<Utc>,
    #[schema(value_type = Option<Object>)]
    old: Option<Value>,
    #[schema(value_type = Object)]
    new: Value,
}

/// An item's audit, newest first.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ItemAudit {
    entries: Vec<AuditEntryBody>,
}

/// `GET /admin/api/items/{id}/audit`: who changed what of an item, and when.
#[utoipa::path(get, path = "/admin/api/items/{id}/audit", operation_id = "getItemAudit", tag = "admin",
    params(("id" = i64, Path, description = "The item")),
    responses(
        (status = 200, description = "Who changed what and when, newest first", body = ItemAudit),
        (status = 404, description = "`ITEM_NOT_FOUND`", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn item_audit(
    _admin: Admin,
    id: web::Path<i64>,
    items: web::Data<Items>,
) -> Result<HttpResponse, ApiError> {
    let id = item_id(id.into_inner())?;
    items
        .catalog()
        .get(id)
        .ok_or(crate::sale::SaleError::ItemNotFound)?;
    let entries = items
        .audit(id)
        .await?
        .into_iter()
        .map(|e| AuditEntryBody {
            action: e.action.label().to_string(),
            changed_by: e.changed_by,
            changed_at: e.changed_at,
            old: e.old,
            new: e.new,
        })
        .collect();
    Ok(HttpResponse::Ok().json(ItemAudit { entries }))
}
