//! The one error type of the HTTP boundary and its mapping to responses.
//!
//! Every failure a client can see is an [`ApiError`] variant, and this file decides its
//! stable `code`, an [`ErrorCode`] (whose status is the code's, `ErrorCode::status`),
//! except for a sale's and the waiting room's refusals: `ApiError::Sale` carries the
//! [`SaleError`], whose code and message the sale decides (in one place beside its
//! metric label), and `ApiError::Room` the [`RoomError`]. Bodies are always JSON
//! `{"code": "...", "message": "..."}` (plus `field` for validation errors). Internal
//! causes are logged here, once, and never sent to the client.

use std::borrow::Cow;

use actix_web::http::header::{ContentType, HeaderMap, HeaderValue, RETRY_AFTER, WWW_AUTHENTICATE};
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

use super::rate_limit_headers::RateLimitHeaders;
use crate::identity::SignInError;
use crate::limiter::{Refusal, Rejection};
use crate::sale::records::ChangeRefused;
use crate::sale::room::RoomError;
use crate::sale::ItemChangeError;
use crate::sale::OrderError;
use crate::sale::SaleError;
use crate::vocabulary::{ErrorCode, OrderState};

/// Every way a request can fail, as the client sees it: each variant answers one status
/// with one stable `code`.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The body is not JSON, or not of the expected shape; serde's words for where.
    #[error("request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// A field failed a check; the body names it.
    #[error("{message}")]
    Validation {
        /// The field at fault, in the API's spelling.
        field: String,
        /// What is wrong with it, for the client.
        message: String,
    },
    /// A body without `Content-Type: application/json`.
    #[error("expected Content-Type: application/json")]
    UnsupportedMediaType,
    /// A body over the route's limit.
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The body did not arrive within the body deadline (`body_timeout_ms`).
    #[error("the request body did not arrive in time")]
    RequestTimeout,
    /// No route, item or page by that name.
    #[error("no such resource")]
    NotFound,
    /// The route exists with another method.
    #[error("method not allowed on this resource")]
    MethodNotAllowed,
    /// A static page's `If-Match` / `If-Unmodified-Since` did not hold.
    #[error("the page changed since the version the request names")]
    PreconditionFailed,
    /// A static page's `Range` lies outside it.
    #[error("the requested range is outside the page")]
    RangeNotSatisfiable,
    /// No bearer token, or one that does not verify.
    #[error("missing or invalid credentials")]
    Unauthenticated,
    /// The limiter refused; the body names the dimension and carries its message.
    #[error("{}", .0.message())]
    RateLimited(Box<Refusal>),
    /// An operator blocked the caller's user or address: refused before the limiter.
    #[error("this account or address is blocked")]
    Blocked,
    /// The limiter could not ask Redis and the policy fails `closed`.
    #[error("the rate limiter is unavailable, please retry shortly")]
    LimiterUnavailable,
    /// Too many refused admin tokens from this address.
    #[error("too many failed sign-ins, try again later")]
    SignInLocked {
        /// When the lockout ends, in milliseconds (the `Retry-After` header).
        retry_after_ms: u64,
    },
    /// An edit made from another version of a policy or an edge domain than the stored
    /// one (`If-Match` or the body's `version`): someone else changed it since it was
    /// loaded.
    #[error("it was changed by someone else (it is now at version {current}): reload it and make the change again")]
    VersionConflict {
        /// The stored version, which the client reloads.
        current: i64,
    },
    /// Another request with this key has not finished: retrying later replays its answer.
    #[error("a request with this Idempotency-Key is still in progress")]
    IdempotencyInProgress,
    /// The key is the user's, and was used for another item.
    #[error("this Idempotency-Key was used for another item")]
    IdempotencyMismatch,
    /// Too many purchases of this user with an `Idempotency-Key` are in flight at once.
    #[error("too many purchases in progress, wait for one to finish")]
    TooManyPending,
    /// An operator's change to an item was not made.
    #[error(transparent)]
    ItemChange(#[from] ItemChangeError),
    /// The waiting room refused: its code, status and message are the room's.
    #[error(transparent)]
    Room(#[from] RoomError),
    /// The sale refused a purchase: its code, status and message are the sale's.
    #[error(transparent)]
    Sale(#[from] SaleError),
    /// No order with this id belongs to the caller.
    #[error("no such order")]
    OrderNotFound,
    /// Only a `pending_payment` order can be paid or cancelled; the body names its state.
    #[error("the order is {}, not pending payment", .0.as_str())]
    OrderState(OrderState),
    /// `degraded` says what else is wrong without making the instance unready (see
    /// `routes::health`).
    #[error("not ready: {} unavailable", down.join(", "))]
    NotReady {
        /// The dependencies this instance cannot serve without (`postgres`, `redis`).
        down: Vec<&'static str>,
        /// The ones whose absence only degrades it.
        degraded: Vec<&'static str>,
    },
    /// The NGINX gate's decision endpoint was asked without its secret (`X-Gate-Secret`,
    /// `gate_secret`). Not the client's fault but NGINX's configuration: a 500, which is
    /// also what NGINX's `auth_request` answers its client for any status but 2xx, 401
    /// and 403.
    #[error(
        "X-Gate-Secret is missing or wrong: NGINX's gate location must send SECKILL_GATE_SECRET"
    )]
    GateSecretInvalid,
    /// Anything the client cannot fix. The cause is logged, never returned.
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    /// A 400 `VALIDATION_FAILED` for `field`.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Validation {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The body of every error answer. `code` is the stable part (the README's table);
/// the other fields appear only with the codes that have them.
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub(crate) struct ErrorBody<'a> {
    /// One of [`ErrorCode`]'s words: the OpenAPI document makes it their enum.
    #[schema(value_type = String, example = "SOLD_OUT")]
    code: ErrorCode,
    /// Borrowed where the text exists already (a rule's message): a stampede's 429s
    /// are the commonest answer and should not format a copy each.
    #[schema(value_type = String)]
    message: Cow<'a, str>,
    /// `VALIDATION_FAILED`: the field or header at fault, in the client's spelling.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    field: Option<&'a str>,
    /// `NOT_READY`: the stores that did not answer (`redis`, `postgres`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<String>>)]
    down: Option<&'a [&'static str]>,
    /// `NOT_READY`: what else is degraded (`orders_breaker_open`, …), when anything is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<String>>)]
    degraded: Option<&'a [&'static str]>,
    /// `RATE_LIMITED` by a limiter rule: which rule (`api`, `user`, `ip`, …) refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    dimension: Option<&'a str>,
    /// `RATE_LIMITED`, `POLLING_TOO_FAST`: milliseconds until a retry can be admitted.
    #[serde(rename = "retryAfterMs", skip_serializing_if = "Option::is_none")]
    retry_after_ms: Option<u64>,
    /// `ORDER_PENDING`: the order to look for in `GET /api/orders/mine`.
    #[serde(rename = "orderId", skip_serializing_if = "Option::is_none")]
    order_id: Option<uuid::Uuid>,
    /// `VERSION_CONFLICT`: the policy's version now.
    #[serde(rename = "currentVersion", skip_serializing_if = "Option::is_none")]
    current_version: Option<i64>,
    /// `QUEUE_NOT_OPEN`: when joining opens.
    #[serde(rename = "opensAt", skip_serializing_if = "Option::is_none")]
    opens_at: Option<chrono::DateTime<chrono::Utc>>,
    /// `PRICE_CHANGED`: the item's price now, in cents.
    #[serde(rename = "priceCents", skip_serializing_if = "Option::is_none")]
    price_cents: Option<i64>,
    /// `STOCK_TOO_LOW`: the least the item's stock can be set to now.
    #[serde(rename = "minStock", skip_serializing_if = "Option::is_none")]
    min_stock: Option<i64>,
    /// `NOT_ADMITTED`: where to join the item's queue.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    queue: Option<&'a str>,
    /// `ORDER_STATE`: the order's state now (`paid`, `cancelled`, `expired`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    state: Option<&'static str>,
}

impl ErrorBody<'_> {
    fn new(code: ErrorCode) -> Self {
        Self {
            code,
            message: Cow::Borrowed(""),
            field: None,
            down: None,
            degraded: None,
            dimension: None,
            retry_after_ms: None,
            order_id: None,
            current_version: None,
            opens_at: None,
            price_cents: None,
            min_stock: None,
            queue: None,
            state: None,
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.answer().status
    }

    fn error_response(&self) -> HttpResponse {
        let (status, headers, body) = self.parts();
        let mut response = HttpResponse::build(status)
            .content_type(ContentType::json())
            .body(body);
        for (name, value) in headers {
            response.headers_mut().append(name, value);
        }
        response
    }
}

/// Everything an error's answer says, decided in [`ApiError::answer`]'s one match.
struct Answer<'a> {
    status: StatusCode,
    body: ErrorBody<'a>,
    headers: HeaderMap,
}

impl ApiError {
    /// The stable, documented machine-readable code (the README's table).
    pub fn code(&self) -> ErrorCode {
        self.answer().body.code
    }

    /// The answer's status, its headers besides the content type (always JSON), and its
    /// body: what a response is made of, and what `http::idempotency` keeps of one. The
    /// cause of a failure the client cannot fix is logged here, once.
    pub fn parts(&self) -> (StatusCode, HeaderMap, String) {
        match self {
            Self::Internal(cause) if crate::store::is_unreachable(cause) => {
                tracing::warn!(error = %format!("{cause:#}"), "request failed: a store cannot be reached")
            }
            Self::Internal(cause) => {
                tracing::error!(error = %format!("{cause:#}"), "request failed")
            }
            // The secret presented is never logged, only that it did not match.
            Self::GateSecretInvalid => {
                tracing::warn!("the NGINX gate was asked without its secret")
            }
            Self::Sale(SaleError::OrderFailed(cause)) => {
                tracing::error!(error = %format!("{cause:#}"), "order failed")
            }
            Self::ItemChange(ItemChangeError::Refused(ChangeRefused::Failed(cause))) => {
                tracing::error!(error = %format!("{cause:#}"), "item change failed")
            }
            Self::Room(RoomError::Unavailable(cause)) => {
                tracing::warn!(error = %format!("{cause:#}"), "waiting room unavailable")
            }
            _ => {}
        }
        let Answer {
            status,
            body,
            headers,
        } = self.answer();
        // A body of strings and numbers always serializes; the fallback is for form.
        let body = serde_json::to_string(&body).unwrap_or_else(|_| {
            format!(
                r#"{{"code":"{}","message":"internal error"}}"#,
                ErrorCode::Internal.as_str()
            )
        });
        (status, headers, body)
    }

    /// Status, code, the body's extra fields and the headers of each error, in one
    /// place. The message is the error's text (`Display`), but for a limiter refusal,
    /// whose rule's message is borrowed: a stampede's 429s are the commonest answer.
    fn answer(&self) -> Answer<'_> {
        use ErrorCode as C;
        // Its code is chosen by the match below.
        let mut body = ErrorBody::new(C::Internal);
        let mut headers = HeaderMap::new();
        let code = match self {
            Self::MalformedJson(_) => C::MalformedJson,
            Self::Validation { field, .. } => {
                body.field = Some(field);
                C::ValidationFailed
            }
            Self::UnsupportedMediaType => C::UnsupportedMediaType,
            Self::PayloadTooLarge { .. } => C::PayloadTooLarge,
            Self::RequestTimeout => C::RequestTimeout,
            Self::NotFound => C::NotFound,
            Self::MethodNotAllowed => C::MethodNotAllowed,
            Self::PreconditionFailed => C::PreconditionFailed,
            Self::RangeNotSatisfiable => C::RangeNotSatisfiable,
            Self::Unauthenticated => {
                headers.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                C::Unauthenticated
            }
            Self::RateLimited(refusal) => {
                body.message = Cow::Borrowed(refusal.message());
                body.dimension = Some(refusal.dimension());
                body.retry_after_ms = Some(refusal.retry_after_ms());
                refusal.write_headers(&mut headers);
                C::RateLimited
            }
            Self::SignInLocked { retry_after_ms } => {
                body.retry_after_ms = Some(*retry_after_ms);
                if let Ok(value) = retry_after_ms.div_ceil(1000).to_string().parse() {
                    headers.insert(RETRY_AFTER, value);
                }
                C::RateLimited
            }
            Self::LimiterUnavailable => C::LimiterUnavailable,
            Self::GateSecretInvalid => C::GateSecretInvalid,
            Self::Blocked => C::Blocked,
            Self::VersionConflict { current } => {
                body.current_version = Some(*current);
                C::VersionConflict
            }
            Self::IdempotencyInProgress => C::IdempotencyInProgress,
            Self::IdempotencyMismatch => C::IdempotencyMismatch,
            Self::TooManyPending => C::TooManyPending,
            Self::Sale(error) => {
                match error {
                    SaleError::OrderPending(order_id) => body.order_id = Some(*order_id),
                    SaleError::PriceChanged { price_cents } => {
                        body.price_cents = Some(*price_cents)
                    }
                    SaleError::NotAdmitted { queue } => body.queue = Some(queue),
                    _ => {}
                }
                if let Some(wait) = error.retry_after() {
                    // Whole seconds, rounded up: never "retry now" for a wait under one.
                    let seconds = wait.as_millis().div_ceil(1000).max(1);
                    if let Ok(value) = seconds.to_string().parse() {
                        headers.insert(RETRY_AFTER, value);
                    }
                }
                error.code()
            }
            Self::Room(error) => {
                match error {
                    RoomError::NotOpen(at) => body.opens_at = Some(*at),
                    RoomError::InvalidSettings(invalid) => body.field = Some(invalid.field()),
                    RoomError::Sale(SaleError::OrderPending(id)) => body.order_id = Some(*id),
                    RoomError::Sale(SaleError::PriceChanged { price_cents }) => {
                        body.price_cents = Some(*price_cents)
                    }
                    RoomError::PollingTooFast { retry_after_ms } => {
                        body.retry_after_ms = Some(*retry_after_ms);
                        if let Ok(value) = retry_after_ms.div_ceil(1000).max(1).to_string().parse()
                        {
                            headers.insert(RETRY_AFTER, value);
                        }
                    }
                    _ => {}
                }
                error.code()
            }
            Self::ItemChange(error) => match error {
                ItemChangeError::StockTooLow { min } => {
                    body.min_stock = Some(*min);
                    C::StockTooLow
                }
                ItemChangeError::EditInProgress => C::EditInProgress,
                ItemChangeError::Refused(ChangeRefused::NotFound) => C::ItemNotFound,
                ItemChangeError::Refused(ChangeRefused::Archived) => C::ItemArchived,
                ItemChangeError::Refused(ChangeRefused::EndedByOperator) => C::EndedByOperator,
                ItemChangeError::Refused(ChangeRefused::StockMoved) => C::EditInProgress,
                ItemChangeError::Refused(ChangeRefused::Failed(_)) => {
                    // The cause is logged (`parts`), never sent.
                    body.message = Cow::Borrowed("internal error");
                    C::Internal
                }
            },
            Self::OrderNotFound => C::OrderNotFound,
            Self::OrderState(state) => {
                body.state = Some(state.as_str());
                C::OrderState
            }
            Self::NotReady { down, degraded } => {
                body.down = Some(down);
                body.degraded = (!degraded.is_empty()).then_some(degraded.as_slice());
                C::NotReady
            }
            Self::Internal(cause) if crate::store::is_unreachable(cause) => {
                // The cause is logged (`parts`), never sent.
                body.message = Cow::Borrowed("a store cannot be reached; try again shortly");
                headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
                C::StoreUnavailable
            }
            Self::Internal(_) => C::Internal,
        };
        body.code = code;
        // Every status is its code's: one status per code, as the README's table says.
        let status =
            StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if body.message.is_empty() {
            body.message = Cow::Owned(self.to_string());
        }
        Answer {
            status,
            body,
            headers,
        }
    }
}

impl From<Rejection> for ApiError {
    fn from(rejection: Rejection) -> Self {
        match rejection {
            Rejection::Refused(refusal) => Self::RateLimited(refusal),
            Rejection::Unavailable => Self::LimiterUnavailable,
            Rejection::NeedsUser => Self::Unauthenticated,
            Rejection::Misconfigured(reason) => Self::Internal(anyhow::anyhow!(reason)),
        }
    }
}

impl From<SignInError> for ApiError {
    fn from(error: SignInError) -> Self {
        match error {
            SignInError::Refused => Self::Unauthenticated,
            SignInError::Locked { retry_after_ms } => Self::SignInLocked { retry_after_ms },
            SignInError::LockoutUnavailable => Self::LimiterUnavailable,
        }
    }
}

impl From<crate::rules::edit::RuleChangeError> for ApiError {
    fn from(error: crate::rules::edit::RuleChangeError) -> Self {
        use crate::rules::edit::RuleChangeError as E;
        match error {
            E::UnknownPolicy(_) => Self::NotFound,
            E::VersionConflict { current, .. } => Self::VersionConflict { current },
            E::Store(cause) => Self::Internal(cause),
            E::UnknownRule { .. }
            | E::BadRuleEdit { .. }
            | E::Invalid(_)
            | E::NotAllowed { .. } => {
                Self::validation(error.field().unwrap_or_default(), error.to_string())
            }
        }
    }
}

impl From<crate::edge::DomainChangeError> for ApiError {
    fn from(error: crate::edge::DomainChangeError) -> Self {
        use crate::edge::DomainChangeError;
        match error {
            DomainChangeError::Invalid(error) => Self::validation(error.field, error.reason),
            DomainChangeError::Unknown(_) => Self::NotFound,
            DomainChangeError::VersionConflict { current, .. } => Self::VersionConflict { current },
            DomainChangeError::TooMany => Self::validation("domain", error.to_string()),
            DomainChangeError::Store(cause) => Self::Internal(cause),
        }
    }
}

impl From<OrderError> for ApiError {
    fn from(error: OrderError) -> Self {
        match error {
            OrderError::NotFound => Self::OrderNotFound,
            OrderError::State(state) => Self::OrderState(state),
            OrderError::Paid(_) => Self::OrderState(OrderState::Paid),
            OrderError::Store(cause) => Self::Internal(cause),
        }
    }
}
