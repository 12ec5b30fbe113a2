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

#[derive(Debug, Deserialize, Validate)]
#[serde(rename_all = "camelCase")]
pub struct SessionRequest {
    #[validate(range(min = 1, message = "userId must be a positive integer"))]
    user_id: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionResponse {
    token: String,
    user_id: UserId,
    expires_at: DateTime<Utc>,
}

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

/// `GET /api/me`: who the bearer token says the caller is.
pub async fn me(shopper: Shopper) -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({ "userId": shopper.0 }))
}
