//! `POST /seckill` and `GET /api/orders/mine`.

use actix_web::http::header::ContentType;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use validator::Validate;

use crate::configuration::policies::ORDERS_READ_POLICY;
use crate::domain::UserId;
use crate::http::auth::Shopper;
use crate::http::client_ip::client_ip;
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::limiter::{Caller, Limiter};
use crate::sale::idempotency::{Claim, Idempotency, IdempotencyKey};
use crate::sale::item::{Item, ItemId};
use crate::sale::postgres::Order;
use crate::sale::{Sale, SaleError};

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

pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// The purchase. Extractors run in argument order: the token is checked (401) before
/// the body is read (400). Then the answers that need no Redis; then an optional
/// `Idempotency-Key` is claimed, and the rest is the sale's.
pub async fn purchase(
    shopper: Shopper,
    body: JsonBody<PurchaseRequest>,
    req: HttpRequest,
    sale: web::Data<Sale>,
    idempotency: web::Data<Idempotency>,
) -> Result<HttpResponse, ApiError> {
    let user = shopper.0;
    let item_id = ItemId::try_from(body.0.item_id)
        .map_err(|e| ApiError::validation("itemId", e.to_string()))?;
    let caller = Caller {
        user: Some(user),
        ip: client_ip(&req)?,
        client_id: None,
        route: "/seckill".into(),
    };
    let key = idempotency_key(&req)?;
    let item = sale.precheck(item_id)?;
    // Sortable by time: the order inserts append to the primary-key index.
    let order_id = Uuid::now_v7();
    let Some(key) = key else {
        return Ok(purchase_response(&sale, &item, user, order_id, &caller)
            .await
            .response);
    };

    match idempotency
        .claim(user, &key, item.id, order_id)
        .await
        .map_err(ApiError::OrderFailed)?
    {
        Claim::Fresh => {}
        Claim::TooMany => return Err(ApiError::TooManyPending),
        Claim::Mismatch => return Err(ApiError::IdempotencyMismatch),
        Claim::Replay { status, body } => {
            sale.record_replay();
            let status = StatusCode::from_u16(status).map_err(|e| ApiError::Internal(e.into()))?;
            return Ok(replayed(HttpResponse::build(status), body));
        }
        Claim::InProgress {
            order: Some(order),
            stale: true,
        } => {
            // Its request may have died after the commit: the order answers for it.
            let Some(order) = sale
                .committed_order(order, user)
                .await
                .map_err(ApiError::OrderFailed)?
            else {
                return Err(ApiError::IdempotencyInProgress);
            };
            sale.record_replay();
            let body = serde_json::to_string(&OrderBody::from(&order))
                .map_err(|e| ApiError::Internal(e.into()))?;
            store_answer(&idempotency, user, &key, item.id, StatusCode::OK, &body).await;
            return Ok(replayed(HttpResponse::Ok(), body));
        }
        Claim::InProgress { .. } => return Err(ApiError::IdempotencyInProgress),
    }
    let answer = purchase_response(&sale, &item, user, order_id, &caller).await;
    if answer.pending {
        // The claim stays: a retry once the commit has landed is answered from the order.
        return Ok(answer.response);
    }
    if !answer.is_final {
        if let Err(e) = idempotency.release(user, &key).await {
            tracing::warn!(error = %format!("{e:#}"), "could not release an idempotency key");
        }
        return Ok(answer.response);
    }
    let status = answer.response.status();
    let (head, body) = answer.response.into_parts();
    let bytes = actix_web::body::to_bytes(body)
        .await
        .map_err(|_| ApiError::Internal(anyhow::anyhow!("unreadable response body")))?;
    store_answer(
        &idempotency,
        user,
        &key,
        item.id,
        status,
        &String::from_utf8_lossy(&bytes),
    )
    .await;
    Ok(head.set_body(bytes).map_into_boxed_body())
}

/// A stored answer, sent again.
fn replayed(mut builder: actix_web::HttpResponseBuilder, body: String) -> HttpResponse {
    builder
        .content_type(ContentType::json())
        .insert_header(("Idempotent-Replayed", "true"))
        .body(body)
}

/// Keeps a final answer for replays; the answer stands even when Redis cannot keep it.
async fn store_answer(
    idempotency: &Idempotency,
    user: UserId,
    key: &IdempotencyKey,
    item: ItemId,
    status: StatusCode,
    body: &str,
) {
    if let Err(e) = idempotency
        .complete(user, key, item, status.as_u16(), body)
        .await
    {
        tracing::warn!(error = %format!("{e:#}"), "could not store an idempotent answer");
    }
}

/// A purchase's answer; whether it is final (kept for idempotent replays) or pending
/// (its COMMIT still running).
struct PurchaseAnswer {
    response: HttpResponse,
    is_final: bool,
    pending: bool,
}

/// The purchase's answer, success or refusal, with the limiter's headers whenever the
/// limiter admitted the request.
async fn purchase_response(
    sale: &Sale,
    item: &Item,
    user: UserId,
    order_id: Uuid,
    caller: &Caller<'_>,
) -> PurchaseAnswer {
    let (mut response, admission, is_final, pending) =
        match sale.purchase(item, user, order_id, caller).await {
            Ok(purchase) => (
                HttpResponse::Ok().json(OrderBody::from(&purchase.order)),
                Some(purchase.admission),
                true,
                false,
            ),
            Err(failure) => {
                let is_final = failure.error.is_final();
                let pending = matches!(failure.error, SaleError::OrderPending(_));
                (
                    ApiError::from(failure.error).error_response(),
                    failure.admission,
                    is_final,
                    pending,
                )
            }
        };
    if let Some(admission) = admission {
        admission.write_headers(response.headers_mut());
    }
    PurchaseAnswer {
        response,
        is_final,
        pending,
    }
}

fn idempotency_key(req: &HttpRequest) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(value) = req.headers().get(IDEMPOTENCY_KEY_HEADER) else {
        return Ok(None);
    };
    IdempotencyKey::parse(value.to_str().unwrap_or(""))
        .map(Some)
        .map_err(|e| ApiError::validation("Idempotency-Key", e.to_string()))
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
    };
    let admission = limiter.check(ORDERS_READ_POLICY, None, &caller).await?;
    let orders = sale.orders_of(shopper.0).await?;
    let orders: Vec<OrderBody> = orders.iter().map(OrderBody::from).collect();
    let mut response = HttpResponse::Ok().json(serde_json::json!({ "orders": orders }));
    admission.write_headers(response.headers_mut());
    Ok(response)
}
