//! `POST /api/session`: the development login. Registered only when `dev_login` is on;
//! otherwise the path does not exist (404).

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use validator::Validate;

use crate::domain::UserId;
use crate::http::auth::Shopper;
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::identity::TokenKeys;

/// The body of `POST /api/session`.
#[derive(Debug, Deserialize, Validate, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionRequest {
    #[schema(minimum = 1, example = 42)]
    #[validate(range(min = 1, message = "userId must be a positive integer"))]
    user_id: i64,
}

/// A shopper token and its expiry.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionResponse {
    token: String,
    #[schema(value_type = i64, minimum = 1)]
    user_id: UserId,
    expires_at: DateTime<Utc>,
}

/// `POST /api/session`: a token for any user id (a development aid, off in production).
#[utoipa::path(post, path = "/api/session", operation_id = "createSession", tag = "shopper",
    description = "The development login: a token for any user id. Served only in local mode \
        (`SECKILL_ENVIRONMENT=local` or `SECKILL_DEV_LOGIN=true`); elsewhere the path does not exist.",
    request_body = SessionRequest,
    responses(
        (status = 200, description = "A shopper token", body = SessionResponse),
        (status = 404, description = "`NOT_FOUND`: the development login is off (production)", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn create(
    body: JsonBody<SessionRequest>,
    keys: web::Data<TokenKeys>,
) -> Result<HttpResponse, ApiError> {
    let user_id = UserId::try_from(body.0.user_id)
        .map_err(|e| ApiError::validation("userId", e.to_string()))?;
    let issued = keys.issue(user_id)?;
    Ok(HttpResponse::Ok().json(SessionResponse {
        token: issued.token,
        user_id,
        expires_at: issued.expires_at,
    }))
}

/// Who the bearer token says the caller is.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Me {
    #[schema(value_type = i64, minimum = 1)]
    user_id: UserId,
}

/// `GET /api/me`: who the bearer token says the caller is.
#[utoipa::path(get, path = "/api/me", operation_id = "getShopper", tag = "shopper", security(("shopper_jwt" = [])),
    responses((status = 200, description = "The caller", body = Me)))]
pub async fn me(shopper: Shopper) -> HttpResponse {
    HttpResponse::Ok().json(Me { user_id: shopper.0 })
}
