//! Who is calling, at the HTTP edge: the [`Shopper`] extractor (a bearer JWT) and the
//! [`require_admin`] middleware with its [`Admin`] extractor.
//!
//! Every shopper failure is the same 401 `UNAUTHENTICATED`: a client learns nothing
//! about *why* a forged token was refused.

use std::future::{ready, Ready};

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::header::AUTHORIZATION;
use actix_web::middleware::Next;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};

use super::api_error::ApiError;
use super::forwarded::client_ip;
use crate::domain::UserId;
use crate::identity::{Admin, AdminGuard, TokenKeys};

/// An authenticated shopper. Taking it as a handler argument makes the route require a
/// valid bearer token; the check runs before the body is read.
#[derive(Debug, Clone, Copy)]
pub struct Shopper(pub UserId);

impl FromRequest for Shopper {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(authenticate(req).map(Shopper))
    }
}

fn authenticate(req: &HttpRequest) -> Result<UserId, ApiError> {
    let keys = req
        .app_data::<web::Data<TokenKeys>>()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("TokenKeys are not registered")))?;
    let token = bearer_token(req).ok_or(ApiError::Unauthenticated)?;
    keys.verify(token).map_err(|_| ApiError::Unauthenticated)
}

/// The credentials of `Authorization: Bearer <token>`; the scheme is case-insensitive.
pub fn bearer_token(req: &HttpRequest) -> Option<&str> {
    let value = req.headers().get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Middleware for the `/admin/api` scope: authenticates before routing, so every admin
/// path (unknown ones too) answers 401 without a valid token, and no handler reads a
/// body first. The operator is left in the request for the [`Admin`] extractor.
pub async fn require_admin(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let guard = req.app_data::<web::Data<AdminGuard>>().cloned();
    let authenticated = match guard {
        Some(guard) => match client_ip(req.request()) {
            Ok(ip) => guard
                .authenticate(ip, bearer_token(req.request()))
                .await
                .map_err(ApiError::from),
            Err(e) => Err(e),
        },
        None => Err(ApiError::Internal(anyhow::anyhow!(
            "AdminGuard is not registered"
        ))),
    };
    match authenticated {
        Ok(admin) => {
            req.extensions_mut().insert(admin);
            Ok(next.call(req).await?.map_into_boxed_body())
        }
        Err(error) => Ok(req.error_response(error)),
    }
}

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        // Outside the guarded scope there is no operator: refuse rather than trust.
        ready(
            req.extensions()
                .get::<Admin>()
                .cloned()
                .ok_or(ApiError::Unauthenticated),
        )
    }
}
