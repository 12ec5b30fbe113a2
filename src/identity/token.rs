//! Shoppers' bearer tokens: HS256 JWTs with the user id in `sub`.
//!
//! What a token must be to be accepted:
//! - signed HS256 with our secret (a token naming another algorithm is refused before
//!   its signature is looked at);
//! - `sub` a user id, `exp` present and not passed;
//! - `nbf`, when present, reached; `iat`, when present, not in the future;
//! - valid for at most `token_max_lifetime_secs`: `exp` no further than that from now,
//!   and from `iat` when the token has one (a token valid for a century is refused
//!   whoever signed it);
//! - `iss` and `aud` equal to `token_issuer` / `token_audience` when those are set (then
//!   the claims are required); a token carrying an `aud` is refused when no audience
//!   is set, so a token minted for another service cannot be replayed here.
//!
//! Each check allows [`LEEWAY_SECS`] of clock skew. Every refusal is the same
//! [`InvalidToken`]: a client learns nothing about which check failed.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::domain::UserId;

/// Clock skew tolerated on `exp`, `nbf` and `iat`. Small on purpose: a stolen token
/// must not live long.
const LEEWAY_SECS: u64 = 5;

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iat: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    aud: Option<String>,
}

/// What tokens this deployment issues and accepts (settings `token_ttl_secs`,
/// `token_max_lifetime_secs`, `token_issuer`, `token_audience`).
#[derive(Debug, Clone)]
pub struct TokenRules {
    /// Lifetime of the tokens the dev login issues.
    pub ttl: Duration,
    /// The longest validity an accepted token may have.
    pub max_lifetime: Duration,
    /// Required `iss`, if any.
    pub issuer: Option<String>,
    /// Required `aud`, if any.
    pub audience: Option<String>,
}

/// Signing and verification keys plus the validation rules, built once at start-up.
pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    rules: TokenRules,
}

/// A shopper's token as `POST /api/session` hands it out.
#[derive(Debug)]
pub struct IssuedToken {
    /// The signed JWT.
    pub token: String,
    /// When it stops being accepted.
    pub expires_at: DateTime<Utc>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid token")]
pub struct InvalidToken;

impl TokenKeys {
    /// Refuses an empty secret, which could sign nothing.
    pub fn new(secret: &SecretString, rules: TokenRules) -> anyhow::Result<Self> {
        let secret = secret.expose_secret().as_bytes();
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        let mut required = vec!["exp", "sub"];
        if let Some(issuer) = &rules.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        if let Some(audience) = &rules.audience {
            validation.set_audience(&[audience]);
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        Ok(Self {
            encoding: EncodingKey::from_secret(secret).context("the JWT secret is empty")?,
            decoding: DecodingKey::from_secret(secret).context("the JWT secret is empty")?,
            validation,
            rules,
        })
    }

    /// A token for `user`, valid for the configured lifetime.
    pub fn issue(&self, user: UserId) -> anyhow::Result<IssuedToken> {
        let now = Utc::now();
        let expires_at =
            now + chrono::Duration::from_std(self.rules.ttl).context("token ttl too large")?;
        let claims = Claims {
            sub: user.to_string(),
            exp: expires_at.timestamp(),
            iat: Some(now.timestamp()),
            iss: self.rules.issuer.clone(),
            aud: self.rules.audience.clone(),
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .context("signing a token")?;
        Ok(IssuedToken { token, expires_at })
    }

    /// The user a token names, if it verifies (signature, algorithm, expiry, issuer and
    /// audience).
    pub fn verify(&self, token: &str) -> Result<UserId, InvalidToken> {
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|_| InvalidToken)?
            .claims;
        self.check_lifetime(&claims, Utc::now().timestamp())?;
        claims.sub.parse().map_err(|_| InvalidToken)
    }

    /// `exp` at most the longest lifetime away, from now and from `iat`; `iat` not in
    /// the future.
    fn check_lifetime(&self, claims: &Claims, now: i64) -> Result<(), InvalidToken> {
        let max = i64::try_from(self.rules.max_lifetime.as_secs()).unwrap_or(i64::MAX);
        let leeway = LEEWAY_SECS as i64;
        let within = |from: i64| claims.exp.saturating_sub(from) <= max.saturating_add(leeway);
        let issued_ok = claims
            .iat
            .is_none_or(|iat| iat <= now.saturating_add(leeway) && within(iat));
        if within(now) && issued_ok {
            Ok(())
        } else {
            Err(InvalidToken)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> TokenRules {
        TokenRules {
            ttl: Duration::from_secs(60),
            max_lifetime: Duration::from_secs(3_600),
            issuer: None,
            audience: None,
        }
    }

    fn keys() -> TokenKeys {
        TokenKeys::new(&SecretString::from("unit-test-secret"), rules()).unwrap()
    }

    fn sign(keys: &TokenKeys, claims: serde_json::Value) -> String {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &keys.encoding).unwrap()
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
        let exp = Utc::now().timestamp() + 60;
        let token = sign(&keys, serde_json::json!({ "sub": "admin", "exp": exp }));
        assert!(keys.verify(&token).is_err());
    }

    #[test]
    fn iat_is_optional_nbf_is_enforced_and_the_lifetime_is_capped() {
        let keys = keys();
        let now = Utc::now().timestamp();
        let accepted = |claims| keys.verify(&sign(&keys, claims)).is_ok();
        assert!(accepted(serde_json::json!({ "sub": "7", "exp": now + 60 })));
        assert!(accepted(
            serde_json::json!({ "sub": "7", "exp": now + 60, "nbf": now - 1 })
        ));
        assert!(!accepted(
            serde_json::json!({ "sub": "7", "exp": now + 4_000, "nbf": now + 3_000 })
        ));
        assert!(accepted(
            serde_json::json!({ "sub": "7", "exp": now + 3_600 })
        ));
        assert!(!accepted(
            serde_json::json!({ "sub": "7", "exp": now + 3_700 })
        ));
        assert!(!accepted(
            serde_json::json!({ "sub": "7", "exp": 1_i64 << 62 })
        ));
        assert!(!accepted(
            serde_json::json!({ "sub": "7", "exp": now + 60, "iat": now - 7_200 })
        ));
        assert!(!accepted(
            serde_json::json!({ "sub": "7", "exp": now + 60, "iat": now + 600 })
        ));
        assert!(!accepted(
            serde_json::json!({ "sub": "7", "exp": now + 60, "aud": "another-service" })
        ));
    }

    #[test]
    fn a_configured_issuer_and_audience_are_required() {
        let keys = TokenKeys::new(
            &SecretString::from("unit-test-secret"),
            TokenRules {
                issuer: Some("https://login.example".into()),
                audience: Some("seckill".into()),
                ..rules()
            },
        )
        .unwrap();
        let now = Utc::now().timestamp();
        let accepted = |claims| keys.verify(&sign(&keys, claims)).is_ok();
        let good = serde_json::json!({
            "sub": "7", "exp": now + 60, "iss": "https://login.example", "aud": "seckill"
        });
        assert!(accepted(good.clone()));
        for (claim, value) in [("iss", "https://evil.example"), ("aud", "other")] {
            let mut bad = good.clone();
            bad[claim] = value.into();
            assert!(!accepted(bad), "a wrong {claim}");
            let mut missing = good.clone();
            missing.as_object_mut().unwrap().remove(claim);
            assert!(!accepted(missing), "no {claim}");
        }
        let issued = keys.issue(UserId::try_from(7).unwrap()).unwrap();
        assert!(
            keys.verify(&issued.token).is_ok(),
            "its own tokens carry both"
        );
    }
}
