//! A shopper's orders: `GET /api/orders/mine`, and `POST /api/orders/{id}/pay` and
//! `…/cancel`, which move the caller's own order out of `pending_payment` (the payment
//! is a stand-in for a payment provider's confirmation). The order's body is here too,
//! for every route that answers one (the purchase, the operators' search).

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::configuration::policies::ORDERS_READ_POLICY;
use crate::http::auth::Shopper;
use crate::http::idempotency::Idempotent;
use crate::http::rate_limit::caller;
use crate::http::rate_limit_headers::RateLimitHeaders;
use crate::http::ApiError;
use crate::limiter::Limiter;
use crate::sale::records::Order;
use crate::sale::Orders;

/// An order as its shopper sees it.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Order)]
pub struct OrderBody {
    order_id: Uuid,
    item_id: i64,
    user_id: i64,
    created_at: DateTime<Utc>,
    /// `pending_payment`, `paid`, `cancelled` or `expired`.
    #[schema(value_type = String, example = "pending_payment")]
    state: &'static str,
    /// When a `pending_payment` order expires unless paid.
    pay_by: Option<DateTime<Utc>>,
}

impl From<&Order> for OrderBody {
    fn from(order: &Order) -> Self {
        Self {
            order_id: order.id,
            item_id: order.item_id.get(),
            user_id: order.user_id.get(),
            created_at: order.created_at,
            state: order.state.as_str(),
            pay_by: order.pay_by,
        }
    }
}

/// The shopper's orders.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Orders)]
pub struct OrderList {
    orders: Vec<OrderBody>,
}

impl OrderList {
    /// The shopper's view of `orders`, in their order.
    pub fn new(orders: &[Order]) -> Self {
        Self {
            orders: orders.iter().map(OrderBody::from).collect(),
        }
    }
}

/// `POST /api/orders/{id}/pay`: pays a pending order.
#[utoipa::path(post, path = "/api/orders/{id}/pay", operation_id = "payOrder", tag = "shopper", security(("shopper_jwt" = [])),
    params(
        ("id" = Uuid, Path, description = "The order"),
        ("Idempotency-Key" = Option<String>, Header, pattern = r"^[A-Za-z0-9_-]{1,64}$",
            description = "Makes a retry safe: a retried payment of an order it paid answers the paid order again"),
    ),
    responses(
        (status = 200, description = "The order, paid", body = OrderBody),
        (status = 400, description = "`VALIDATION_FAILED`: the `Idempotency-Key` is malformed"),
        (status = 404, description = "`ORDER_NOT_FOUND`: the caller has no such order"),
        (status = 409, description = "`ORDER_STATE`: the order is not pending payment (`state` says what it is; a pending order past its deadline is `expired`)", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn pay(
    shopper: Shopper,
    id: web::Path<Uuid>,
    idempotent: Idempotent,
    orders: web::Data<Orders>,
) -> Result<HttpResponse, ApiError> {
    let order = orders
        .pay(shopper.0, id.into_inner(), idempotent.has_key())
        .await?;
    Ok(HttpResponse::Ok().json(OrderBody::from(&order)))
}

/// `POST /api/orders/{id}/cancel`: cancels a pending order; its unit goes back on sale.
#[utoipa::path(post, path = "/api/orders/{id}/cancel", operation_id = "cancelOrder", tag = "shopper", security(("shopper_jwt" = [])),
    params(("id" = Uuid, Path, description = "The order")),
    responses(
        (status = 200, description = "The order, cancelled: its unit is back on sale", body = OrderBody),
        (status = 404, description = "`ORDER_NOT_FOUND`: the caller has no such order"),
        (status = 409, description = "`ORDER_STATE`: the order is not pending payment (`state` says what it is)", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn cancel(
    shopper: Shopper,
    id: web::Path<Uuid>,
    orders: web::Data<Orders>,
) -> Result<HttpResponse, ApiError> {
    let order = orders.cancel(shopper.0, id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(OrderBody::from(&order)))
}

/// `GET /api/orders/mine`: the shopper's orders, newest first, from Postgres, behind
/// the `orders_read` limiter policy (with its headers).
#[utoipa::path(get, path = "/api/orders/mine", operation_id = "listMyOrders", tag = "shopper", security(("shopper_jwt" = [])),
    responses((status = 200, description = "The caller's orders, newest first", body = OrderList)))]
pub async fn my_orders(
    shopper: Shopper,
    req: HttpRequest,
    orders: web::Data<Orders>,
    limiter: web::Data<Limiter>,
) -> Result<HttpResponse, ApiError> {
    let caller = caller(&req, ORDERS_READ_POLICY, Some(shopper.0), None)?;
    let admission = limiter.check(ORDERS_READ_POLICY, None, &caller).await?;
    let mine = orders.of_user(shopper.0).await?;
    let mut response = HttpResponse::Ok().json(OrderList::new(&mine));
    admission.write_headers(response.headers_mut());
    Ok(response)
}
