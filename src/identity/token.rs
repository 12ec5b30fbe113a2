use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::domain::UserId;

/// Clock skew tolerated on `exp`. Small on purpose: a stolen token must not live long.
const LEEWAY_SECS: u64 = 5;

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
    iat: i64,
}

/// Signing and verification keys plus the validation rules, built once at start-up.
pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    ttl: Duration,
}

#[derive(Debug)]
pub struct IssuedToken {
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid token")]
pub struct InvalidToken;

impl TokenKeys {
    pub fn new(secret: &SecretString, ttl: Duration) -> Self {
        let secret = secret.expose_secret().as_bytes();
        // Pinned to HS256: a token that names another algorithm (`none`, RS256 with our
        // secret as a "public key", …) is refused before its signature is looked at.
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = LEEWAY_SECS;
        validation.set_required_spec_claims(&["exp", "sub"]);
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            ttl,
        }
    }

    pub fn issue(&self, user: UserId) -> anyhow::Result<IssuedToken> {
        let now = Utc::now();
        let expires_at =
            now + chrono::Duration::from_std(self.ttl).context("token ttl too large")?;
        let claims = Claims {
            sub: user.to_string(),
            exp: expires_at.timestamp(),
            iat: now.timestamp(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .context("signing a token")?;
        Ok(IssuedToken { token, expires_at })
    }

    pub fn verify(&self, token: &str) -> Result<UserId, InvalidToken> {
        let data = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|_| InvalidToken)?;
        data.claims.sub.parse().map_err(|_| InvalidToken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> TokenKeys {
        TokenKeys::new(
            &SecretString::from("unit-test-secret"),
            Duration::from_secs(60),
        )
    }

    #[test]
    fn a_token_round_trips_to_its_user() {
        let keys = keys();
        let user = UserId::try_from(7).unwrap();
        let issued = keys.issue(user).unwrap();
        assert_eq!(keys.verify(&issued.token).unwrap(), user);
    }

    #[test]
    fn a_token_whose_sub_is_not_a_user_id_is_refused() {
        let keys = keys();
        let claims = Claims {
            sub: "admin".into(),
            exp: Utc::now().timestamp() + 60,
            iat: 0,
        };
        let token =
            jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &keys.encoding).unwrap();
        assert!(keys.verify(&token).is_err());
    }
}
