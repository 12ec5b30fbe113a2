//! Items: the public listing and the operators' creation endpoint.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use validator::Validate;

use crate::error::ApiError;
use crate::identity::Admin;
use crate::sale::item::{Item, NewItem};
use crate::sale::Sale;
use crate::web::JsonBody;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemBody<'a> {
    id: i64,
    name: &'a str,
    price_cents: i64,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    total_stock: i32,
    remaining_stock: i64,
}

impl<'a> ItemBody<'a> {
    pub fn new(item: &'a Item, remaining_stock: i64) -> Self {
        Self {
            id: item.id.get(),
            name: &item.name,
            price_cents: item.price_cents,
            starts_at: item.starts_at,
            ends_at: item.ends_at,
            total_stock: item.total_stock,
            remaining_stock,
        }
    }
}

/// `GET /api/items`: every item whose sale has not ended (sold-out ones included),
/// with live remaining stock.
pub async fn list(sale: web::Data<Sale>) -> HttpResponse {
    let listing = sale.listing().await;
    let items: Vec<_> = listing
        .iter()
        .map(|(item, remaining)| ItemBody::new(item, *remaining))
        .collect();
    HttpResponse::Ok().json(serde_json::json!({ "items": items }))
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
pub async fn create(
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
