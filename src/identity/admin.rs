//! Operators: `Authorization: Bearer <admin token>` on `/admin/api/…`.
//!
//! Tokens come from `SECKILL_ADMIN_TOKEN`: one secret, or a comma-separated list of
//! `name:secret` pairs so that changes can be attributed. No token configured means
//! every admin request is refused: admin endpoints are closed by default.
//!
//! Guessing is rate-limited per client IP: every refused token counts against the
//! `admin_auth` limiter policy (10 per 5 minutes by default); once it refuses, the IP is
//! locked out, right tokens included, until the window frees up.

use std::borrow::Cow;
use std::sync::Arc;

use std::future::{ready, Ready};

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use super::bearer_token;
use crate::domain::ClientIp;
use crate::error::ApiError;
use crate::limiter::http::client_ip;
use crate::limiter::policy::ADMIN_AUTH_POLICY;
use crate::limiter::{Caller, Limiter, Rejection};
use crate::metrics::RedisPurpose;
use crate::store::RedisStore;

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

    /// Every configured secret (for the production-safety check of their strength).
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(_, secret)| secret.expose_secret())
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

/// Admin tokens plus the lockout of IPs that keep guessing.
pub struct AdminGuard {
    tokens: AdminTokens,
    limiter: Arc<Limiter>,
    redis: RedisStore,
}

impl AdminGuard {
    pub fn new(tokens: AdminTokens, limiter: Arc<Limiter>, redis: RedisStore) -> Self {
        Self {
            tokens,
            limiter,
            redis,
        }
    }

    fn lock_key(&self, ip: ClientIp) -> String {
        format!("{}:admin-lockout:{ip}", self.redis.prefix())
    }

    /// Milliseconds left on this IP's lockout, if any. A Redis failure does not lock
    /// anyone out (the tokens still have to be right).
    async fn locked_for(&self, ip: ClientIp) -> Option<u64> {
        let pttl = redis::cmd("PTTL").arg(self.lock_key(ip)).to_owned();
        let ms: i64 = self.redis.call(RedisPurpose::Other, &pttl).await.ok()?;
        u64::try_from(ms).ok().filter(|ms| *ms > 0)
    }

    /// Counts a refused token; returns the lockout when this one crossed the limit.
    async fn record_failure(&self, ip: ClientIp) -> Option<u64> {
        let caller = Caller {
            user: None,
            ip,
            client_id: None,
            route: Cow::Borrowed("/admin/api"),
        };
        let Err(Rejection::Refused(refusal)) =
            self.limiter.check(ADMIN_AUTH_POLICY, None, &caller).await
        else {
            return None;
        };
        let wait = refusal.retry_after_ms();
        let lock = redis::cmd("SET")
            .arg(self.lock_key(ip))
            .arg(1)
            .arg("PX")
            .arg(wait)
            .to_owned();
        if let Err(e) = self.redis.call::<()>(RedisPurpose::Other, &lock).await {
            tracing::warn!(error = %e, "could not store an admin lockout");
        }
        tracing::warn!(client.ip = %ip, lockout_ms = wait, "admin sign-in locked after repeated failures");
        Some(wait)
    }

    async fn authenticate(&self, req: &HttpRequest) -> Result<Admin, ApiError> {
        let ip = client_ip(req)?;
        if let Some(wait) = self.locked_for(ip).await {
            return Err(ApiError::SignInLocked {
                retry_after_ms: wait,
            });
        }
        let matched = bearer_token(req).and_then(|presented| self.tokens.authenticate(presented));
        match matched {
            Some(name) => Ok(Admin {
                name: name.to_string(),
            }),
            None => match self.record_failure(ip).await {
                Some(wait) => Err(ApiError::SignInLocked {
                    retry_after_ms: wait,
                }),
                None => Err(ApiError::Unauthenticated),
            },
        }
    }
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
        Some(guard) => guard.authenticate(req.request()).await,
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

/// An authenticated operator, put there by [`require_admin`].
#[derive(Debug, Clone)]
pub struct Admin {
    pub name: String,
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
