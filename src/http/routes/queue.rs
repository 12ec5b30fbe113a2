//! `POST /api/items/{id}/queue` (join) and `GET /api/items/{id}/queue` (poll): the
//! waiting room as shoppers see it (`sale::room`).

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::configuration::policies::QUEUE_JOIN_POLICY;
use crate::http::auth::Shopper;
use crate::http::rate_limit::caller;
use crate::http::rate_limit_headers::RateLimitHeaders;
use crate::http::routes::items::item_id;
use crate::http::ApiError;
use crate::limiter::Limiter;
use crate::sale::room::{Answer, PollBudget, WaitingRoom, POLL_EVERY_SECS};

/// `blocked_total{policy}`'s label for a blocked poll, which no limiter policy decides.
pub const POLL_BLOCKED_LABEL: &str = "queue_poll";

/// The header a poll carries its ticket in: a header, so tickets stay out of access logs.
pub const TICKET_HEADER: &str = "Queue-Ticket";

/// Where a shopper stands in an item's queue.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueBody {
    /// `waiting`, `admitted`, `sold_out`, `expired` or `closed`.
    #[schema(example = "waiting")]
    state: &'static str,
    /// The shopper's number in the queue (1 is the first), once drawn; `null` until
    /// the draw (`drawsAt`).
    position: Option<u64>,
    /// Places between the one being served and this one.
    ahead: Option<u64>,
    /// The estimated wait, from the admission rate measured over the last 30 s: the
    /// median and the 25th / 75th percentiles. Present only when `likely` is true and
    /// something is being admitted: a place past the stock is told no wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_seconds_p25: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_seconds_p75: Option<u64>,
    /// True only when the place's rank among the places still waiting (`ahead + 1`) is
    /// within `unitsFree`, or the place is admitted; false past them, and when sold out;
    /// `null` when it cannot be known: no place yet (`position` is `null`), a place
    /// lost, a room closed.
    likely: Option<bool>,
    /// `waiting` only: units left that no live pass holds, as of this instance's copy.
    units_free: Option<u64>,
    /// `waiting` only, when `likely` is false: how many places past `unitsFree` the
    /// place's rank is (1: the first place without a unit). A unit still reaches it if a
    /// pass runs out or an order goes unpaid.
    past_stock: Option<u64>,
    /// When to poll next: above the server's keep-alive, so no connection is held.
    refresh_interval_seconds: u64,
    /// The join's answer only: what the polls send in `Queue-Ticket`.
    #[serde(skip_serializing_if = "Option::is_none")]
    ticket: Option<String>,
    /// The join's answer only: true when the user had joined before, so this is the
    /// place kept for them (the same ticket, the same place).
    #[serde(skip_serializing_if = "Option::is_none")]
    rejoined: Option<bool>,
    /// `admitted` only: what `POST /seckill` needs in `Queue-Pass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pass: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pass_expires_at: Option<DateTime<Utc>>,
    /// `sold_out` only: units held by unpaid orders, which come back if not paid.
    #[serde(skip_serializing_if = "Option::is_none")]
    may_return: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    may_return_until: Option<DateTime<Utc>>,
    /// When the place will be drawn (while `position` is `null`).
    #[serde(skip_serializing_if = "Option::is_none")]
    draws_at: Option<DateTime<Utc>>,
    /// `closed` only: `sold_out` (sold out and no unit can come back: the queue has
    /// ended; a stock raise reopens it), `ended` (the sale's end) or `off` (the room
    /// was turned off).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "sold_out")]
    closed_reason: Option<&'static str>,
    /// `closed` only, where known: when the room closed (`sold_out`) or the sale ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    closed_at: Option<DateTime<Utc>>,
    /// The operator's message to everyone waiting (plain text, at most 200 characters);
    /// absent when there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// True when this instance could not read the room lately: the answer is what it
    /// last knew, and no pass is handed out.
    stale: bool,
}

impl From<Answer> for QueueBody {
    fn from(answer: Answer) -> Self {
        let standing = answer.standing;
        let time = |ms: i64| DateTime::<Utc>::from_timestamp_millis(ms);
        Self {
            state: standing.state.label(),
            position: standing.place.map(|place| place + 1),
            ahead: standing.ahead,
            wait_seconds: standing.wait.and_then(|w| w.p50),
            wait_seconds_p25: standing.wait.and_then(|w| w.p25),
            wait_seconds_p75: standing.wait.and_then(|w| w.p75),
            likely: standing.odds.likely,
            units_free: standing.odds.units_free,
            past_stock: standing.odds.past_stock,
            refresh_interval_seconds: POLL_EVERY_SECS,
            ticket: answer.ticket,
            rejoined: answer.rejoined,
            pass_expires_at: answer
                .pass
                .as_ref()
                .and(standing.pass_expires_ms)
                .and_then(|ms| DateTime::from_timestamp(ms.div_euclid(1_000), 0)),
            pass: answer.pass,
            may_return: standing.may_return.map(|(units, _)| units),
            may_return_until: standing
                .may_return
                .and_then(|(_, until)| until.and_then(time)),
            draws_at: standing.draws_at_ms.and_then(time),
            closed_reason: standing.closed.map(|(reason, _)| reason.label()),
            closed_at: standing.closed.and_then(|(_, at)| at.and_then(time)),
            message: answer.message,
            stale: standing.stale,
        }
    }
}

/// Joins the item's queue; joining again answers the same place and ticket.
#[utoipa::path(post, path = "/api/items/{id}/queue", operation_id = "joinQueue", tag = "shopper", security(("shopper_jwt" = [])),
    description = "Joins the item's waiting room, behind the `queue_join` policy (per user and per IP). \
        Opens at the room's `prequeueStartsAt` (or the sale's start); those who join before the start \
        are shuffled at the start.",
    params(("id" = i64, Path, description = "The item")),
    responses(
        (status = 200, description = "The place and the ticket", body = QueueBody),
        (status = 404, description = "`ITEM_NOT_FOUND`", body = crate::http::api_error::ErrorBody),
        (status = 403, description = "`BLOCKED`: an operator blocked the user or the address", body = crate::http::api_error::ErrorBody),
        (status = 409, description = "`QUEUE_NOT_OPEN` (with `opensAt`); `QUEUE_CLOSED`: the room is off or the sale has ended; `ROOM_CLOSED`: the item sold out and no unit can come back (the queue has ended; a stock raise reopens it); `SOLD_OUT`: no unit left, some may come back", body = crate::http::api_error::ErrorBody),
        (status = 429, description = "`RATE_LIMITED` by the `queue_join` policy", body = crate::http::api_error::ErrorBody),
        (status = 503, description = "`QUEUE_UNAVAILABLE` or `LIMITER_UNAVAILABLE`: Redis did not answer", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn join(
    shopper: Shopper,
    id: web::Path<i64>,
    req: HttpRequest,
    room: web::Data<WaitingRoom>,
    limiter: web::Data<Limiter>,
) -> Result<HttpResponse, ApiError> {
    let item = item_id(id.into_inner())?;
    let caller = caller(&req, QUEUE_JOIN_POLICY, Some(shopper.0), None)?;
    let admission = limiter.check(QUEUE_JOIN_POLICY, None, &caller).await?;
    let answer = room.join(item, shopper.0, caller.ip).await?;
    let mut response = HttpResponse::Ok().json(QueueBody::from(answer));
    admission.write_headers(response.headers_mut());
    Ok(response)
}

/// Where the caller stands: answered from this instance's copy of the room, no Redis
/// call, within the ticket's poll budget (checked first: a refused poll spends nothing).
#[utoipa::path(get, path = "/api/items/{id}/queue", operation_id = "pollQueue", tag = "shopper", security(("shopper_jwt" = [])),
    params(("id" = i64, Path, description = "The item"),
        ("Queue-Ticket" = String, Header, description = "The ticket the join answered")),
    responses(
        (status = 200, description = "The caller's standing; `pass` when admitted", body = QueueBody),
        (status = 400, description = "`VALIDATION_FAILED`: no `Queue-Ticket` header", body = crate::http::api_error::ErrorBody),
        (status = 403, description = "`INVALID_TICKET`: forged, someone else's or another item's; `BLOCKED`: an operator blocked the user or the address", body = crate::http::api_error::ErrorBody),
        (status = 404, description = "`ITEM_NOT_FOUND`", body = crate::http::api_error::ErrorBody),
        (status = 429, description = "`POLLING_TOO_FAST` (with `retryAfterMs` and `Retry-After`): this ticket's polls are past its bucket (one a second, a burst of 20, by default)", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn poll(
    shopper: Shopper,
    id: web::Path<i64>,
    req: HttpRequest,
    room: web::Data<WaitingRoom>,
    budget: web::Data<PollBudget>,
) -> Result<HttpResponse, ApiError> {
    let item = item_id(id.into_inner())?;
    // No policy guards the poll: its blocked refusals count under the poll's own name.
    caller(&req, POLL_BLOCKED_LABEL, Some(shopper.0), None)?;
    budget.take(item, shopper.0)?;
    let ticket = req
        .headers()
        .get(TICKET_HEADER)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| {
            ApiError::validation(TICKET_HEADER, "the Queue-Ticket header is required")
        })?;
    let answer = room.poll(item, shopper.0, ticket)?;
    Ok(HttpResponse::Ok().json(QueueBody::from(answer)))
}
