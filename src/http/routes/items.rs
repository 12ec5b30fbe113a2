//! Items: the public listing (operators create and pause items in `routes::admin`).

use std::sync::Arc;

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::http::ApiError;
use crate::sale::item::{Item, ItemId};
use crate::sale::room::WaitingRoom;
use crate::sale::{Items, SaleError};

/// An item as shoppers see it, with live remaining stock.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Item)]
pub struct ItemBody<'a> {
    id: i64,
    #[schema(value_type = String)]
    name: &'a str,
    price_cents: i64,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    total_stock: i32,
    remaining_stock: i64,
    paused: bool,
    /// Whether the item sells through its waiting room (`POST /api/items/{id}/queue`).
    waiting_room: bool,
    /// With a waiting room on: when joining opens (its pre-queue, or the sale's start).
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_opens_at: Option<DateTime<Utc>>,
}

impl<'a> ItemBody<'a> {
    /// `item` with `remaining_stock` (Redis's count during a sale).
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
            waiting_room: false,
            queue_opens_at: None,
        }
    }

    /// The same item, saying when its waiting room opens (`None`: no room on).
    pub fn with_waiting_room(self, opens_at: Option<DateTime<Utc>>) -> Self {
        Self {
            waiting_room: opens_at.is_some(),
            queue_opens_at: opens_at,
            ..self
        }
    }
}

/// An item id from a path: one that cannot be an item's is no item (404).
pub fn item_id(id: i64) -> Result<ItemId, ApiError> {
    ItemId::try_from(id).map_err(|_| ApiError::from(SaleError::ItemNotFound))
}

/// Items on sale.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Items)]
pub struct ItemList<'a> {
    items: Vec<ItemBody<'a>>,
}

impl<'a> ItemList<'a> {
    /// The listing as items with their live stock.
    pub fn new(listing: &'a [(Arc<Item>, i64)], room: &WaitingRoom) -> Self {
        let items = listing
            .iter()
            .map(|(item, remaining)| {
                ItemBody::new(item, *remaining).with_waiting_room(room.opens_at(item))
            })
            .collect();
        Self { items }
    }
}

/// `GET /api/items`: every item whose sale has not ended (sold-out ones included),
/// with live remaining stock.
#[utoipa::path(get, path = "/api/items", operation_id = "listShopItems", tag = "shopper",
    responses((status = 200, description = "Items whose sale has not ended", body = ItemList)))]
pub async fn list(items: web::Data<Items>, room: web::Data<WaitingRoom>) -> HttpResponse {
    let listing = items.listing().await;
    HttpResponse::Ok().json(ItemList::new(&listing, &room))
}
