//! `Idempotency-Key`: a retried request (after a timeout, a double tap) gets the first
//! attempt's answer instead of doing the work twice. Today only `POST /seckill` takes one,
//! where doing it twice would mean a second order or a second charge against the limiter.
//!
//! This is an HTTP concern: what is kept is an answer (status and JSON body), so it lives
//! here and not in the sale. A handler takes the [`Idempotent`] extractor and hands its
//! work to [`Idempotent::run`], which claims the key, replays a kept answer, and once the
//! work has answered keeps, holds or frees the key as the answer's [`Replayable`] says:
//! only the domain knows how far its work got, so only it can say whether a retry may be
//! told the same.
//!
//! A key is scoped to the user. The handler claims it only after the answers that need no
//! Redis (for a purchase: unknown item, sale not open, paused, known sold out; cheap to
//! recompute, so they make no key), and before the limiter, so concurrent duplicates are
//! decided by Redis: exactly one proceeds, the others see it in progress.
//!
//! A claim lives only as long as the work can (for a purchase: reservation deadline +
//! commit timeout), so a request that died frees its key soon; a claim older than the
//! commit timeout is stale, and a retry meeting it asks the route ([`Recover`]) for the
//! answer the dead request would have given. Answers that stand are kept for
//! `idempotency_ttl_secs` and replayed byte for byte with `Idempotent-Replayed: true`;
//! the headers of one attempt (the limiter's quota) are not kept, as they would misstate
//! the quota of a later one. A user holds at most `idempotency_max_in_flight` claims.

mod claims;

use std::future::{ready, Future, Ready};

use actix_web::dev::Payload;
use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use actix_web::http::StatusCode;
use actix_web::{web, FromRequest, HttpRequest, HttpResponse};
use serde::Serialize;
use uuid::Uuid;

pub use self::claims::{Claim, Idempotency, IdempotencyLimits};
use super::ApiError;
use crate::domain::IdempotencyKey;
use crate::domain::UserId;
use crate::sale::item::ItemId;
use crate::sale::{Replayable, SaleError};

/// The header a purchase's retry names its first attempt in.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
const REPLAYED_HEADER: HeaderName = HeaderName::from_static("idempotent-replayed");

/// An answer as this layer handles it: a status and a JSON body (what a replay sends
/// again), the headers of this attempt only, and whether a retry may be given it.
pub struct Reply {
    status: StatusCode,
    body: String,
    headers: HeaderMap,
    replayable: Replayable,
}

impl Reply {
    /// A success: `body` as JSON.
    pub fn ok(body: &impl Serialize, replayable: Replayable) -> Self {
        match serde_json::to_string(body) {
            Ok(body) => Self {
                status: StatusCode::OK,
                body,
                headers: HeaderMap::new(),
                replayable,
            },
            Err(e) => Self::error(&ApiError::Internal(e.into()), Replayable::No),
        }
    }

    /// A refusal, with the headers it always carries (a 429's `Retry-After`, …).
    pub fn error(error: &ApiError, replayable: Replayable) -> Self {
        let (status, headers, body) = error.parts();
        Self {
            status,
            body,
            headers,
            replayable,
        }
    }

    /// Headers that belong to this attempt and are not replayed.
    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.headers
    }

    fn into_response(self, replayed: bool) -> HttpResponse {
        let mut response = HttpResponse::with_body(self.status, self.body).map_into_boxed_body();
        // The reply's own map becomes the response's: moved, not copied header by header
        // (a 429 carries four, and refusals are the commonest answer).
        let headers = response.headers_mut();
        *headers = self.headers;
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if replayed {
            headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        }
        response
    }
}

/// What a key is claimed for: `user`'s work on `item`, which will leave a trace under
/// `id` (for a purchase: the order it places).
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    /// The user whose key it is.
    pub user: UserId,
    /// The item the key was first used for.
    pub item: ItemId,
    /// The trace it leaves: for a purchase, the order it places.
    pub id: Uuid,
}

/// What the layer asks of the route it guards.
pub trait Recover {
    /// Counts an answer given again instead of being worked out.
    fn replayed(&self);

    /// The answer to a claim that has run too long: its request may have died after
    /// doing its work (under trace `id`). `None` when the work was not done.
    fn recover(&self, id: Uuid) -> impl Future<Output = Result<Option<Reply>, ApiError>>;
}

/// An `Idempotency-Key` header's value as a key, or the 400 a malformed one gets (a
/// value that is not even text included). Public for the parser fuzz targets (`fuzz/`).
pub fn idempotency_key(value: &HeaderValue) -> Result<IdempotencyKey, ApiError> {
    IdempotencyKey::parse(value.to_str().unwrap_or(""))
        .map_err(|e| ApiError::validation("Idempotency-Key", e.to_string()))
}

/// The request's `Idempotency-Key`, if it has one (400 when it is malformed), and the
/// store that keeps answers for it.
pub struct Idempotent {
    key: Option<IdempotencyKey>,
    store: web::Data<Idempotency>,
}

impl FromRequest for Idempotent {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(Self::read(req))
    }
}

impl Idempotent {
    fn read(req: &HttpRequest) -> Result<Self, ApiError> {
        let store = req
            .app_data::<web::Data<Idempotency>>()
            .cloned()
            .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("Idempotency is not registered")))?;
        let key = req
            .headers()
            .get(IDEMPOTENCY_KEY_HEADER)
            .map(idempotency_key)
            .transpose()?;
        Ok(Self { key, store })
    }

    /// Whether the request names an `Idempotency-Key` (it is a retry-safe request).
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// Answers with `work`, at most once per key: claims the key, replays a kept answer
    /// or recovers a stale claim's, and once `work` has answered keeps, holds or frees
    /// the key as its [`Replayable`] says. Without a key, `work` simply answers.
    pub async fn run<Work: Future<Output = Reply>>(
        mut self,
        attempt: Attempt,
        route: &impl Recover,
        work: impl FnOnce() -> Work,
    ) -> Result<HttpResponse, ApiError> {
        // The work's future is created only once it is due, and the keyed path (claims,
        // replays) is boxed: a purchase's future is several kB, and every future that
        // holds it is copied as a whole when it is built, on every request, refusals
        // included (measured with callgrind: 9k instructions per refused purchase).
        match self.key.take() {
            None => Ok(work().await.into_response(false)),
            Some(key) => Box::pin(self.run_keyed(key, attempt, route, work)).await,
        }
    }

    async fn run_keyed<Work: Future<Output = Reply>>(
        self,
        key: IdempotencyKey,
        attempt: Attempt,
        route: &impl Recover,
        work: impl FnOnce() -> Work,
    ) -> Result<HttpResponse, ApiError> {
        let key = &key;
        let Attempt { user, item, id } = attempt;
        // Without the store there is no knowing whether this is a retry: no work either.
        // A Redis that cannot be reached is said so (503 `STORE_UNAVAILABLE`): no order
        // was tried, so `ORDER_FAILED` would mislead.
        let claimed = self.store.claim(user, key, item, id).await.map_err(|e| {
            if crate::store::is_unreachable(&e) {
                ApiError::Internal(e)
            } else {
                SaleError::OrderFailed(e).into()
            }
        })?;
        match claimed {
            Claim::Fresh => {}
            Claim::TooMany => return Err(ApiError::TooManyPending),
            Claim::Mismatch => return Err(ApiError::IdempotencyMismatch),
            Claim::Replay { status, body } => {
                route.replayed();
                let status =
                    StatusCode::from_u16(status).map_err(|e| ApiError::Internal(e.into()))?;
                let kept = Reply {
                    status,
                    body,
                    headers: HeaderMap::new(),
                    replayable: Replayable::Yes,
                };
                return Ok(kept.into_response(true));
            }
            Claim::InProgress {
                order: Some(claimed),
                stale: true,
            } => {
                let Some(reply) = route.recover(claimed).await? else {
                    return Err(ApiError::IdempotencyInProgress);
                };
                route.replayed();
                self.keep(user, key, item, &reply).await;
                return Ok(reply.into_response(true));
            }
            Claim::InProgress { .. } => return Err(ApiError::IdempotencyInProgress),
        }
        let reply = work().await;
        match reply.replayable {
            Replayable::Yes => self.keep(user, key, item, &reply).await,
            // The claim stays: a retry once the work is over is answered by `recover`.
            Replayable::Pending => {}
            Replayable::No => {
                if let Err(e) = self.store.release(user, key).await {
                    tracing::warn!(error = %format!("{e:#}"), "could not release an idempotency key");
                }
            }
        }
        Ok(reply.into_response(false))
    }

    /// Keeps an answer for replays; the answer stands even when Redis cannot keep it.
    async fn keep(&self, user: UserId, key: &IdempotencyKey, item: ItemId, reply: &Reply) {
        if let Err(e) = self
            .store
            .complete(user, key, item, reply.status.as_u16(), &reply.body)
            .await
        {
            tracing::warn!(error = %format!("{e:#}"), "could not store an idempotent answer");
        }
    }
}
