//! `POST /seckill` and `GET /api/orders/mine`.

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use validator::Validate;

use crate::configuration::policies::ORDERS_READ_POLICY;
use crate::domain::UserId;
use crate::http::auth::Shopper;
use crate::http::client_ip::client_ip;
use crate::http::idempotency::{Attempt, Idempotent, Recover, Reply};
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::limiter::{Caller, Limiter};
use crate::sale::item::ItemId;
use crate::sale::postgres::Order;
use crate::sale::{Purchase, PurchaseFailure, Replayable, Sale, SaleError};

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
/// the body is read (400), and the body before the `Idempotency-Key` (400). Then the
/// answers that need no Redis; the rest is the sale's, once per key.
pub async fn purchase(
    shopper: Shopper,
    body: JsonBody<PurchaseRequest>,
    idempotent: Idempotent,
    req: HttpRequest,
    sale: web::Data<Sale>,
) -> Result<HttpResponse, ApiError> {
    let user = shopper.0;
    let item_id = ItemId::try_from(body.0.item_id)
        .map_err(|e| ApiError::validation("itemId", e.to_string()))?;
    let caller = Caller {
        user: Some(user),
        ip: client_ip(&req)?,
        client_id: None,
        route: "/seckill".into(),
        // The sale names its item itself (`Sale::purchase`).
        partition: None,
    };
    let item = sale.precheck(item_id)?;
    // Sortable by time: the order inserts append to the primary-key index.
    let order_id = Uuid::now_v7();
    let attempt = Attempt {
        user,
        item: item.id,
        id: order_id,
    };
    let retried = Retried { sale: &sale, user };
    let work = || async { reply(sale.purchase(&item, user, order_id, &caller).await) };
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
    sale: &'a Sale,
    user: UserId,
}

impl Recover for Retried<'_> {
    fn replayed(&self) {
        self.sale.record_replay();
    }

    /// Its request may have died after the commit: the order answers for it.
    async fn recover(&self, order: Uuid) -> Result<Option<Reply>, ApiError> {
        let order = self
            .sale
            .committed_order(order, self.user)
            .await
            .map_err(SaleError::OrderFailed)?;
        Ok(order.map(|order| Reply::ok(&OrderBody::from(&order), Replayable::Yes)))
    }
}

/// `GET /api/orders/mine`: the shopper's orders, newest first, from Postgres, behind
/// the `orders_read` limiter policy (with its headers).
pub async fn my_orders(
    shopper: Shopper,
    req: HttpRequest,
    sale: web::Data<Sale>,
    limiter: web::Data<Limiter>,
) -> Result<HttpResponse, ApiError> {
    let caller = Caller {
        user: Some(shopper.0),
        ip: client_ip(&req)?,
        client_id: None,
        route: "/api/orders/mine".into(),
        partition: None,
    };
    let admission = limiter.check(ORDERS_READ_POLICY, None, &caller).await?;
    let orders = sale.orders_of(shopper.0).await?;
    let orders: Vec<OrderBody> = orders.iter().map(OrderBody::from).collect();
    let mut response = HttpResponse::Ok().json(serde_json::json!({ "orders": orders }));
    admission.write_headers(response.headers_mut());
    Ok(response)
}
