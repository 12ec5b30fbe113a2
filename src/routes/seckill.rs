//! `POST /seckill` and `GET /api/orders/mine`.

use actix_web::http::header::ContentType;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use validator::Validate;

use crate::domain::UserId;
use crate::error::ApiError;
use crate::identity::Shopper;
use crate::limiter::http::client_ip;
use crate::limiter::Caller;
use crate::sale::idempotency::{Claim, Idempotency, IdempotencyKey};
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

pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// The purchase. Extractors run in argument order: the token is checked (401) before
/// the body is read (400); then an optional `Idempotency-Key` is claimed, and the rest
/// is the sale's.
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
    let Some(key) = idempotency_key(&req)? else {
        return Ok(purchase_response(&sale, &caller, user, item_id)
            .await
            .response);
    };

    match idempotency
        .claim(user, &key, item_id)
        .await
        .map_err(ApiError::OrderFailed)?
    {
        Claim::Fresh => {}
        Claim::InProgress => return Err(ApiError::IdempotencyInProgress),
        Claim::Mismatch => return Err(ApiError::IdempotencyMismatch),
        Claim::Replay { status, body } => {
            sale.record_replay();
            let status = StatusCode::from_u16(status).map_err(|e| ApiError::Internal(e.into()))?;
            return Ok(HttpResponse::build(status)
                .content_type(ContentType::json())
                .insert_header(("Idempotent-Replayed", "true"))
                .body(body));
        }
    }
    let answer = purchase_response(&sale, &caller, user, item_id).await;
    // Final answers are kept and replayed; anything worth retrying frees the key.
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
    let text = String::from_utf8_lossy(&bytes);
    if let Err(e) = idempotency
        .complete(user, &key, item_id, status.as_u16(), &text)
        .await
    {
        tracing::warn!(error = %format!("{e:#}"), "could not store an idempotent answer");
    }
    Ok(head.set_body(bytes).map_into_boxed_body())
}

/// A purchase's answer and whether it is final (kept for idempotent replays).
struct PurchaseAnswer {
    response: HttpResponse,
    is_final: bool,
}

/// The purchase's answer, success or refusal, with the limiter's headers whenever the
/// limiter admitted the request.
async fn purchase_response(
    sale: &Sale,
    caller: &Caller<'_>,
    user: UserId,
    item_id: ItemId,
) -> PurchaseAnswer {
    let (mut response, admission, is_final) = match sale.purchase(user, item_id, caller).await {
        Ok(purchase) => (
            HttpResponse::Ok().json(OrderBody::from(&purchase.order)),
            Some(purchase.admission),
            true,
        ),
        Err(failure) => {
            let is_final = failure.error.is_final();
            (
                ApiError::from(failure.error).error_response(),
                failure.admission,
                is_final,
            )
        }
    };
    if let Some(admission) = admission {
        admission.write_headers(response.headers_mut());
    }
    PurchaseAnswer { response, is_final }
}

fn idempotency_key(req: &HttpRequest) -> Result<Option<IdempotencyKey>, ApiError> {
    let Some(value) = req.headers().get(IDEMPOTENCY_KEY_HEADER) else {
        return Ok(None);
    };
    IdempotencyKey::parse(value.to_str().unwrap_or(""))
        .map(Some)
        .map_err(|e| ApiError::validation("Idempotency-Key", e.to_string()))
}

/// `GET /api/orders/mine`: the shopper's orders, newest first, from Postgres.
pub async fn my_orders(shopper: Shopper, sale: web::Data<Sale>) -> Result<HttpResponse, ApiError> {
    let orders = sale.orders_of(shopper.0).await?;
    let orders: Vec<OrderBody> = orders.iter().map(OrderBody::from).collect();
    Ok(HttpResponse::Ok().json(serde_json::json!({ "orders": orders })))
}
