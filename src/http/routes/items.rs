//! Items: the public listing (operators create and pause items in `routes::admin`).

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::sale::item::Item;
use crate::sale::Sale;

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
    paused: bool,
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
            paused: item.paused,
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
