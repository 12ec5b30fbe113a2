//! `POST /seckill` and `GET /api/orders/mine`.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use validator::Validate;

use crate::error::ApiError;
use crate::identity::Shopper;
use crate::limiter::http::client_ip;
use crate::limiter::Caller;
use crate::sale::item::ItemId;
use crate::sale::postgres::Order;
use crate::sale::Sale;
use crate::web::JsonBody;

#[derive(Debug, Deserialize, Validate)]
#[serde(rename_all = "camelCase")]
pub struct PurchaseRequest {
    #[validate(range(min = 1, message = "itemId must be a positive integer"))]
    item_id: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderBody {
    order_id: Uuid,
    item_id: i64,
    user_id: i64,
    created_at: DateTime<Utc>,
}

impl From<&Order> for OrderBody {
    fn from(order: &Order) -> Self {
        Self {
            order_id: order.id,
            item_id: order.item_id.get(),
            user_id: order.user_id.get(),
            created_at: order.created_at,
        }
    }
}

/// The purchase. Extractors run in argument order: the token is checked (401) before
/// the body is read (400); everything after that is the sale's.
pub async fn purchase(
    shopper: Shopper,
    body: JsonBody<PurchaseRequest>,
    req: HttpRequest,
    sale: web::Data<Sale>,
) -> Result<HttpResponse, ApiError> {
    let item_id = ItemId::try_from(body.0.item_id)
        .map_err(|e| ApiError::validation("itemId", e.to_string()))?;
    let caller = Caller {
        user: Some(shopper.0),
        ip: client_ip(&req)?,
        client_id: None,
        route: "/seckill".into(),
    };
    let purchase = sale.purchase(shopper.0, item_id, &caller).await?;
    let mut response = HttpResponse::Ok().json(OrderBody::from(&purchase.order));
    purchase.admission.write_headers(response.headers_mut());
    Ok(response)
}

/// `GET /api/orders/mine`: the shopper's orders, newest first, from Postgres.
pub async fn my_orders(shopper: Shopper, sale: web::Data<Sale>) -> Result<HttpResponse, ApiError> {
    let orders = sale.orders_of(shopper.0).await?;
    let orders: Vec<OrderBody> = orders.iter().map(OrderBody::from).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "orders": orders })))
}
