//! `POST /seckill`: the purchase.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use uuid::Uuid;
use validator::Validate;

use super::orders::OrderBody;
use crate::configuration::policies::SECKILL_POLICY;
use crate::domain::UserId;
use crate::http::auth::Shopper;
use crate::http::idempotency::{Attempt, Idempotent, Recover, Reply};
use crate::http::rate_limit::caller;
use crate::http::rate_limit_headers::RateLimitHeaders;
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::sale::item::ItemId;
use crate::sale::room::WaitingRoom;
use crate::sale::{Orders, Outcome, Purchase, PurchaseFailure, Purchases, Replayable, SaleError};

/// The header a purchase carries its queue pass in, when the item has a waiting room.
pub const PASS_HEADER: &str = "Queue-Pass";

/// The body of `POST /seckill`.
#[derive(Debug, Deserialize, Validate, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PurchaseRequest {
    #[schema(minimum = 1, example = 1)]
    #[validate(range(min = 1, message = "itemId must be a positive integer"))]
    item_id: i64,
}

/// The purchase. Extractors run in argument order: the token is checked (401) before
/// the body is read (400), and the body before the `Idempotency-Key` (400). Then the
/// answers that need no Redis; the rest is the sale's, once per key.
#[utoipa::path(post, path = "/seckill", operation_id = "purchase", tag = "shopper", security(("shopper_jwt" = [])),
    description = "Buys one unit of an item: decided by the `seckill` policy's three rules \
        (`api` across all instances, `user`, `ip`) in one Redis call, then an atomic \
        reservation, then the order's commit to Postgres. One order per user per item.",
    request_body = PurchaseRequest,
    params(("Idempotency-Key" = Option<String>, Header, pattern = r"^[A-Za-z0-9_-]{1,64}$",
        description = "Makes a retry safe: a retry with the same key gets the first attempt's answer"),
        ("Queue-Pass" = Option<String>, Header,
        description = "The pass the waiting room's poll handed out: required when the item has a waiting room on")),
    responses(
        (status = 200, description = "The order", body = OrderBody),
        (status = 202, description = "`ORDER_PENDING`: the order's commit is still running; `orderId` names it", body = crate::http::api_error::ErrorBody),
        (status = 400, description = "`VALIDATION_FAILED`: `itemId` or `Idempotency-Key` is wrong"),
        (status = 403, description = "`BLOCKED`: an operator blocked the user or the address (before the limiter). `NOT_ADMITTED`: the item has a waiting room on (its gate in Redis, decided in the reservation's step, after the limiter: the quota is spent) and the request carries no valid pass for this user and item (`queue` says where to join)", body = crate::http::api_error::ErrorBody),
        (status = 404, description = "`ITEM_NOT_FOUND`: no such item", body = crate::http::api_error::ErrorBody),
        (status = 409, description = "`SALE_NOT_STARTED`, `SALE_ENDED`, `SALE_PAUSED`, `PRICE_CHANGED` (with `priceCents`, the price now), `ALREADY_PURCHASED`, `SOLD_OUT`, or `IDEMPOTENCY_IN_PROGRESS`", body = crate::http::api_error::ErrorBody),
        (status = 422, description = "`IDEMPOTENCY_MISMATCH`: the key was used for another item", body = crate::http::api_error::ErrorBody),
        (status = 429, description = "`TOO_MANY_PENDING`: too many of this user's keyed purchases are in flight", body = crate::http::api_error::ErrorBody),
        (status = 503, description = "`ORDER_FAILED`: the order was not committed and Redis was put back; retry. `OVERLOADED`: shed at the concurrency limit that follows the commits' latency, nothing reserved; `ORDERS_UNAVAILABLE`: the orders breaker is open after commits kept failing, nothing reserved; both with `Retry-After`", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn purchase(
    shopper: Shopper,
    body: JsonBody<PurchaseRequest>,
    idempotent: Idempotent,
    req: HttpRequest,
    purchases: web::Data<Purchases>,
    orders: web::Data<Orders>,
    room: web::Data<WaitingRoom>,
) -> Result<HttpResponse, ApiError> {
    let user = shopper.0;
    let item_id = ItemId::try_from(body.0.item_id)
        .map_err(|e| ApiError::validation("itemId", e.to_string()))?;
    let caller = caller(&req, SECKILL_POLICY, Some(user), None)?;
    let item = purchases.precheck(item_id)?;
    // Sortable by time: the order inserts append to the primary-key index.
    let order_id = Uuid::now_v7();
    let attempt = Attempt {
        user,
        item: item.id,
        id: order_id,
    };
    let retried = Retried {
        purchases: &purchases,
        orders: &orders,
        user,
    };
    let pass = req.headers().get(PASS_HEADER).and_then(|v| v.to_str().ok());
    // After a replay (inside `run`): a pass is checked here, not spent, and whether the
    // item needs one is the reservation script's to say (the room gate), after the
    // limiter; the reservation spends it, so nothing that sells nothing can.
    let work = || async {
        let offered = room.check_pass(item.id, user, pass);
        let purchase = purchases
            .purchase(&item, user, order_id, &caller, offered.place())
            .await;
        let outcome = match &purchase {
            Ok(_) => Outcome::Created,
            Err(failure) => failure.outcome(),
        };
        room.count_pass(offered, outcome);
        reply(purchase)
    };
    idempotent.run(attempt, &retried, work).await
}

/// The purchase's answer, success or refusal, with the limiter's headers whenever the
/// limiter admitted the request.
fn reply(purchase: Result<Purchase, PurchaseFailure>) -> Reply {
    let (mut reply, admission) = match purchase {
        Ok(purchase) => (
            Reply::ok(&OrderBody::from(&purchase.order), Replayable::Yes),
            Some(purchase.admission),
        ),
        Err(failure) => {
            let replayable = failure.replayable();
            match failure {
                PurchaseFailure::Limited(rejection) => {
                    (Reply::error(&rejection.into(), replayable), None)
                }
                PurchaseFailure::Refused { error, admission } => {
                    (Reply::error(&error.into(), replayable), Some(admission))
                }
            }
        }
    };
    if let Some(admission) = admission {
        admission.write_headers(reply.headers_mut());
    }
    reply
}

/// A purchase retried with its `Idempotency-Key`.
struct Retried<'a> {
    purchases: &'a Purchases,
    orders: &'a Orders,
    user: UserId,
}

impl Recover for Retried<'_> {
    fn replayed(&self) {
        self.purchases.record_replay();
    }

    /// Its request may have died after the commit: the order answers for it.
    async fn recover(&self, order: Uuid) -> Result<Option<Reply>, ApiError> {
        let order = self
            .orders
            .committed(order, self.user)
            .await
            .map_err(SaleError::OrderFailed)?;
        Ok(order.map(|order| Reply::ok(&OrderBody::from(&order), Replayable::Yes)))
    }
}
