//! The limiter at the HTTP edge: the [`RateLimit`] guard (its response headers are
//! [`RateLimitHeaders`], in `rate_limit_headers`).
//!
//! The guard is the counterpart of a repeatable `@RateLimit` annotation: wrap a resource
//! and every request to it is decided by one policy before the handler runs:
//!
//! ```ignore
//! resource("/api/limited")
//!     .wrap(RateLimit::policy(LIMITED_POLICY).algorithm_from_query("policy"))
//!     .route(web::get().to(handler))
//! ```
//!
//! Routes without it pay nothing. Routes that must validate their input before spending
//! quota (the sale) call [`Limiter::check`] themselves, after validation, with a
//! [`Caller`] from [`caller`], the one way a route builds one.

use std::borrow::Cow;
use std::future::{ready, Ready};
use std::rc::Rc;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform};
use actix_web::{web, HttpRequest};
use futures_util::future::LocalBoxFuture;

use super::api_error::ApiError;
use super::auth::bearer_token;
use super::forwarded::{client_id, client_ip};
use super::rate_limit_headers::RateLimitHeaders;
use crate::domain::UserId;
use crate::identity::TokenKeys;
use crate::limiter::blocklist::Blocklist;
use crate::limiter::keys::ClientKey;
use crate::limiter::{Admission, Algorithm, Caller, Limiter};

/// The one way a route builds its [`Caller`]: the address from [`client_ip`], the
/// route's pattern from the router (`match_pattern`), and what the route
/// knows: its signed-in user and its client. What a policy's rules may key on is what
/// its routes pass here (`configuration::policies::KEY_SOURCES`); a `per_item` policy's
/// partition is the sale's to name (`Caller::in_partition`).
///
/// A caller whose user or address an operator blocked is refused here, 403 `BLOCKED`,
/// before `policy` (which counts it, `blocked_total{policy}`) decides anything: an
/// in-process lookup ([`Blocklist`]), no Redis call.
pub fn caller<'a>(
    req: &'a HttpRequest,
    policy: &str,
    user: Option<UserId>,
    client_id: Option<ClientKey<'a>>,
) -> Result<Caller<'a>, ApiError> {
    let ip = client_ip(req)?;
    if let Some(blocklist) = req.app_data::<web::Data<Blocklist>>() {
        if blocklist.refuses(policy, user, ip) {
            return Err(ApiError::Blocked);
        }
    }
    Ok(Caller {
        user,
        ip,
        client_id,
        // By the matched resource's index: no path matched again, no regex.
        route: req
            .match_pattern()
            .map(Cow::Owned)
            .unwrap_or(Cow::Borrowed("unmatched")),
        partition: None,
    })
}

/// Middleware applying one policy to every request of the wrapped resource.
#[derive(Clone)]
pub struct RateLimit {
    policy: &'static str,
    algorithm_param: Option<&'static str>,
}

impl RateLimit {
    /// The guard of `policy`, whose name is a policy in the settings.
    pub fn policy(policy: &'static str) -> Self {
        Self {
            policy,
            algorithm_param: None,
        }
    }

    /// Lets the caller pick the algorithm with `?<param>=<algorithm>` (any of
    /// [`Algorithm::ALL`]). Each algorithm keeps its own quota (the algorithm is part of
    /// the key).
    pub fn algorithm_from_query(mut self, param: &'static str) -> Self {
        self.algorithm_param = Some(param);
        self
    }

    async fn decide(&self, req: &HttpRequest) -> Result<Admission, ApiError> {
        let limiter = req
            .app_data::<web::Data<Limiter>>()
            .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("Limiter is not registered")))?;
        let algorithm = match self.algorithm_param {
            Some(param) => requested_algorithm(req, param)?,
            None => None,
        };
        let client_id = client_id(req)?;
        // A user rule keys on the bearer token's user when there is a valid one.
        let user = req
            .app_data::<web::Data<TokenKeys>>()
            .zip(bearer_token(req))
            .and_then(|(keys, token)| keys.verify(token).ok());
        // `/api/limited`'s documented fallback, on this route only: without a (believed)
        // `X-Client-Id`, the client is its address.
        let client = client_id.as_ref().map_or(ClientKey::Address, ClientKey::Id);
        let caller = caller(req, self.policy, user, Some(client))?;
        Ok(limiter.check(self.policy, algorithm, &caller).await?)
    }
}

fn requested_algorithm(req: &HttpRequest, param: &str) -> Result<Option<Algorithm>, ApiError> {
    if req.query_string().is_empty() {
        return Ok(None);
    }
    let value = web::Query::<Vec<(String, String)>>::from_query(req.query_string())
        .ok()
        .and_then(|q| q.0.into_iter().find(|(k, _)| k == param).map(|(_, v)| v));
    let Some(value) = value else { return Ok(None) };
    value.parse().map(Some).map_err(|()| {
        let valid: Vec<_> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
        ApiError::validation(
            param,
            format!("{param} must be one of: {}", valid.join(", ")),
        )
    })
}

impl<S, B> Transform<S, ServiceRequest> for RateLimit
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = RateLimitMiddleware<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(RateLimitMiddleware {
            service: Rc::new(service),
            guard: Rc::new(self.clone()),
        }))
    }
}

/// The guard around one resource's service (see [`RateLimit`]).
pub struct RateLimitMiddleware<S> {
    service: Rc<S>,
    guard: Rc<RateLimit>,
}

impl<S, B> Service<ServiceRequest> for RateLimitMiddleware<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let service = Rc::clone(&self.service);
        let guard = Rc::clone(&self.guard);
        Box::pin(async move {
            match guard.decide(req.request()).await {
                Err(error) => Ok(req.error_response(error).map_into_right_body()),
                Ok(admission) => {
                    let mut response = service.call(req).await?;
                    admission.write_headers(response.headers_mut());
                    Ok(response.map_into_left_body())
                }
            }
        })
    }
}
