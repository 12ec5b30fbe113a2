//! Who is calling: shoppers carry a bearer JWT (HS256 only) whose `sub` is their user id.
//!
//! [`TokenKeys`] issues and verifies tokens; [`Shopper`] is the extractor handlers take to
//! require an authenticated user. Every failure is the same 401 `UNAUTHENTICATED`: a
//! client learns nothing about *why* a forged token was refused.

mod admin;
pub mod lockout;
mod token;

pub use admin::{require_admin, Admin, AdminGuard, AdminTokens};
pub use token::{IssuedToken, TokenKeys};

use actix_web::dev::Payload;
use actix_web::http::header::AUTHORIZATION;
use actix_web::{web, FromRequest, HttpRequest};
use std::future::{ready, Ready};

use crate::domain::UserId;
use crate::error::ApiError;

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
