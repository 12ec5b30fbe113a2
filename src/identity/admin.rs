//! Operators: `Authorization: Bearer <admin token>` on `/admin/api/…`.
//!
//! Tokens come from `SECKILL_ADMIN_TOKEN`: one secret, or a comma-separated list of
//! `name:secret` pairs so that changes can be attributed. No token configured means
//! every admin request is refused: admin endpoints are closed by default.

use std::future::{ready, Ready};

use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use super::bearer_token;
use crate::error::ApiError;

pub struct AdminTokens(Vec<(String, SecretString)>);

impl AdminTokens {
    pub fn parse(configured: &SecretString) -> Self {
        let tokens = configured
            .expose_secret()
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| match entry.split_once(':') {
                Some((name, secret)) if !name.is_empty() && !secret.is_empty() => {
                    (name.to_string(), SecretString::from(secret))
                }
                _ => ("admin".to_string(), SecretString::from(entry)),
            })
            .collect();
        Self(tokens)
    }

    /// The name of the token that matches, comparing in constant time so response
    /// timing does not reveal how much of a guess was right.
    fn authenticate(&self, presented: &str) -> Option<&str> {
        let mut found = None;
        for (name, secret) in &self.0 {
            if bool::from(
                secret
                    .expose_secret()
                    .as_bytes()
                    .ct_eq(presented.as_bytes()),
            ) {
                found = Some(name.as_str());
            }
        }
        found
    }
}

/// An authenticated operator. Checked before the body is read.
#[derive(Debug, Clone)]
pub struct Admin {
    pub name: String,
}

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let admin = req
            .app_data::<web::Data<AdminTokens>>()
            .zip(bearer_token(req))
            .and_then(|(tokens, presented)| tokens.authenticate(presented))
            .map(|name| Admin {
                name: name.to_string(),
            })
            .ok_or(ApiError::Unauthenticated);
        ready(admin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_and_plain_tokens_authenticate_and_empty_config_closes() {
        let tokens = AdminTokens::parse(&SecretString::from("alice:s3cret, plain-token"));
        assert_eq!(tokens.authenticate("s3cret"), Some("alice"));
        assert_eq!(tokens.authenticate("plain-token"), Some("admin"));
        assert_eq!(tokens.authenticate("s3cre"), None);
        assert_eq!(tokens.authenticate(""), None);
        let closed = AdminTokens::parse(&SecretString::from(""));
        assert_eq!(closed.authenticate(""), None);
    }
}
