//! `POST /api/orders/{id}/pay` and `…/cancel`: a shopper's own order, out of
//! `pending_payment`. The payment is a stand-in for a payment provider's confirmation.

use actix_web::{web, HttpResponse};
use uuid::Uuid;

use super::seckill::OrderBody;
use crate::http::auth::Shopper;
use crate::http::idempotency::Idempotent;
use crate::http::ApiError;
use crate::sale::Sale;

#[utoipa::path(post, path = "/api/orders/{id}/pay", tag = "shopper", security(("shopper_jwt" = [])),
    params(
        ("id" = Uuid, Path, description = "The order"),
        ("Idempotency-Key" = Option<String>, Header, pattern = r"^[A-Za-z0-9_-]{1,64}$",
            description = "Makes a retry safe: a retried payment of an order it paid answers the paid order again"),
    ),
    responses(
        (status = 200, description = "The order, paid", body = OrderBody),
        (status = 400, description = "`VALIDATION_FAILED`: the `Idempotency-Key` is malformed"),
        (status = 404, description = "`ORDER_NOT_FOUND`: the caller has no such order"),
        (status = 409, description = "`ORDER_STATE`: the order is not pending payment (`state` says what it is; a pending order past its deadline is `expired`)", body = crate::http::error::ErrorBody),
    ))]
pub async fn pay(
    shopper: Shopper,
    id: web::Path<Uuid>,
    idempotent: Idempotent,
    sale: web::Data<Sale>,
) -> Result<HttpResponse, ApiError> {
    let order = sale
        .pay(shopper.0, id.into_inner(), idempotent.has_key())
        .await?;
    Ok(HttpResponse::Ok().json(OrderBody::from(&order)))
}

#[utoipa::path(post, path = "/api/orders/{id}/cancel", tag = "shopper", security(("shopper_jwt" = [])),
    params(("id" = Uuid, Path, description = "The order")),
    responses(
        (status = 200, description = "The order, cancelled: its unit is back on sale", body = OrderBody),
        (status = 404, description = "`ORDER_NOT_FOUND`: the caller has no such order"),
        (status = 409, description = "`ORDER_STATE`: the order is not pending payment (`state` says what it is)", body = crate::http::error::ErrorBody),
    ))]
pub async fn cancel(
    shopper: Shopper,
    id: web::Path<Uuid>,
    sale: web::Data<Sale>,
) -> Result<HttpResponse, ApiError> {
    let order = sale.cancel(shopper.0, id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(OrderBody::from(&order)))
}
