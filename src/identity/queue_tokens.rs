//! A waiting room's two signed tokens: the **ticket** a shopper gets on joining (their
//! join index, so a poll needs no Redis call to find their place) and the **pass** a
//! poll hands out when the place is admitted (what `POST /seckill` asks for).
//!
//! Both are HS256 JWTs signed with a key of their own (`queue_secret`, never the
//! shopper-token secret), and each carries its kind twice, in `aud` and in `typ`:
//! - a ticket or a pass offered as a bearer token fails the shopper-token check (another
//!   key, and an `aud` shopper tokens refuse);
//! - a shopper token offered as either fails here (another key, no `aud`);
//! - a ticket offered as a pass, or the reverse, fails on `aud` and `typ`;
//! - each names its user and item, which the caller compares with the request's.
//!
//! No leeway on `exp`: a pass's validity is what the room promised, to the second.

use anyhow::Context;
use chrono::{DateTime, Utc};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::domain::UserId;

const TICKET: &str = "seckill-queue-ticket";
const PASS: &str = "seckill-queue-pass";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    typ: String,
    aud: String,
    sub: String,
    item: i64,
    /// The ticket's join index, or the pass's place.
    number: u64,
    exp: i64,
}

/// A verified ticket: who joined which item's queue, as its `index`-th joiner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// Who joined.
    pub user: UserId,
    /// The item whose queue.
    pub item: i64,
    /// Its join index: the poll computes the place from it.
    pub index: u64,
}

/// A verified pass: `place` of `item`'s queue was admitted for `user`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Who may buy with it.
    pub user: UserId,
    /// The item it buys.
    pub item: i64,
    /// The place admitted (marked used by the reservation, so a pass buys once).
    pub place: u64,
    /// The pass's `exp` (seconds since the epoch): valid through this second.
    pub expires_at: i64,
}

impl Ticket {
    /// Whether this ticket is `user`'s for `item`: a ticket is worth nothing to anyone else.
    pub fn is_for(&self, user: UserId, item: i64) -> bool {
        self.user == user && self.item == item
    }
}

impl Pass {
    /// Whether this pass is `user`'s for `item`: a pass buys nothing else.
    pub fn is_for(&self, user: UserId, item: i64) -> bool {
        self.user == user && self.item == item
    }
}

/// Why a ticket or pass was not accepted. A client hears only which of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QueueTokenError {
    /// Signed by us, of the right kind, and past its `exp`.
    #[error("expired")]
    Expired,
    /// Anything else: forged, malformed, another kind, another key.
    #[error("invalid")]
    Invalid,
}

/// The queue's signing key and the two validations.
pub struct QueueTokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    ticket: Validation,
    pass: Validation,
}

impl QueueTokens {
    /// Refuses an empty secret, which could sign nothing.
    pub fn new(secret: &SecretString) -> anyhow::Result<Self> {
        let secret = secret.expose_secret().as_bytes();
        let validation = |audience: &str| {
            let mut validation = Validation::new(Algorithm::HS256);
            validation.leeway = 0;
            validation.set_audience(&[audience]);
            validation.set_required_spec_claims(&["exp", "sub", "aud"]);
            validation
        };
        Ok(Self {
            encoding: EncodingKey::from_secret(secret).context("the queue secret is empty")?,
            decoding: DecodingKey::from_secret(secret).context("the queue secret is empty")?,
            ticket: validation(TICKET),
            pass: validation(PASS),
        })
    }

    /// A ticket for `user`'s join of `item`, valid until `until` (the sale's end).
    pub fn ticket(&self, ticket: Ticket, until: DateTime<Utc>) -> anyhow::Result<String> {
        self.sign(
            TICKET,
            ticket.user,
            ticket.item,
            ticket.index,
            until.timestamp(),
        )
    }

    /// A pass for `pass.place`, valid until `pass.expires_at` (seconds since the epoch).
    pub fn pass(&self, pass: Pass) -> anyhow::Result<String> {
        self.sign(PASS, pass.user, pass.item, pass.place, pass.expires_at)
    }

    /// The ticket in `token`, if it is one of ours, unexpired, and a ticket (not a pass).
    pub fn verify_ticket(&self, token: &str) -> Result<Ticket, QueueTokenError> {
        let claims = self.verify(token, TICKET, &self.ticket)?;
        Ok(Ticket {
            user: user_of(&claims)?,
            item: claims.item,
            index: claims.number,
        })
    }

    /// The pass in `token`, if it is one of ours, unexpired, and a pass (not a ticket).
    pub fn verify_pass(&self, token: &str) -> Result<Pass, QueueTokenError> {
        let claims = self.verify(token, PASS, &self.pass)?;
        Ok(Pass {
            user: user_of(&claims)?,
            item: claims.item,
            place: claims.number,
            expires_at: claims.exp,
        })
    }

    fn sign(
        &self,
        kind: &str,
        user: UserId,
        item: i64,
        number: u64,
        exp: i64,
    ) -> anyhow::Result<String> {
        let claims = Claims {
            typ: kind.to_string(),
            aud: kind.to_string(),
            sub: user.to_string(),
            item,
            number,
            exp,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .with_context(|| format!("signing a {kind}"))
    }

    fn verify(
        &self,
        token: &str,
        kind: &str,
        validation: &Validation,
    ) -> Result<Claims, QueueTokenError> {
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, validation)
            .map_err(|e| match e.kind() {
                // Reported only for a token whose signature checked out (our key).
                ErrorKind::ExpiredSignature => QueueTokenError::Expired,
                _ => QueueTokenError::Invalid,
            })?
            .claims;
        if claims.typ == kind {
            Ok(claims)
        } else {
            Err(QueueTokenError::Invalid)
        }
    }
}

fn user_of(claims: &Claims) -> Result<UserId, QueueTokenError> {
    claims.sub.parse().map_err(|_| QueueTokenError::Invalid)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::identity::{TokenKeys, TokenRules};

    fn tokens() -> QueueTokens {
        QueueTokens::new(&SecretString::from("queue-unit-test-secret")).unwrap()
    }

    fn user(id: i64) -> UserId {
        UserId::try_from(id).unwrap()
    }

    fn later(secs: i64) -> DateTime<Utc> {
        Utc::now() + chrono::Duration::seconds(secs)
    }

    fn a_pass(exp: i64) -> Pass {
        Pass {
            user: user(7),
            item: 3,
            place: 41,
            expires_at: exp,
        }
    }

    #[test]
    fn a_ticket_and_a_pass_round_trip() {
        let tokens = tokens();
        let ticket = Ticket {
            user: user(7),
            item: 3,
            index: 12,
        };
        assert_eq!(
            tokens.verify_ticket(&tokens.ticket(ticket, later(60)).unwrap()),
            Ok(ticket)
        );
        let pass = a_pass(later(60).timestamp());
        assert_eq!(tokens.verify_pass(&tokens.pass(pass).unwrap()), Ok(pass));
    }

    #[test]
    fn a_pass_or_ticket_is_for_its_user_and_item_only() {
        let pass = a_pass(later(60).timestamp());
        assert!(pass.is_for(user(7), 3));
        assert!(!pass.is_for(user(8), 3) && !pass.is_for(user(7), 4));
        let ticket = Ticket {
            user: user(7),
            item: 3,
            index: 0,
        };
        assert!(ticket.is_for(user(7), 3));
        assert!(!ticket.is_for(user(8), 3) && !ticket.is_for(user(7), 4));
    }

    #[test]
    fn a_ticket_is_not_a_pass_nor_the_reverse() {
        let tokens = tokens();
        let ticket = tokens
            .ticket(
                Ticket {
                    user: user(7),
                    item: 3,
                    index: 41,
                },
                later(60),
            )
            .unwrap();
        let pass = tokens.pass(a_pass(later(60).timestamp())).unwrap();
        assert_eq!(tokens.verify_pass(&ticket), Err(QueueTokenError::Invalid));
        assert_eq!(tokens.verify_ticket(&pass), Err(QueueTokenError::Invalid));
    }

    #[test]
    fn a_forged_or_foreign_pass_is_invalid_and_an_old_one_expired() {
        let tokens = tokens();
        let other = QueueTokens::new(&SecretString::from("another-queue-secret")).unwrap();
        let forged = other.pass(a_pass(later(60).timestamp())).unwrap();
        assert_eq!(tokens.verify_pass(&forged), Err(QueueTokenError::Invalid));
        let good = tokens.pass(a_pass(later(60).timestamp())).unwrap();
        let mut tampered = good.clone();
        tampered.pop();
        tampered.push(if good.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(tokens.verify_pass(&tampered), Err(QueueTokenError::Invalid));
        let old = tokens.pass(a_pass(later(-1).timestamp())).unwrap();
        assert_eq!(tokens.verify_pass(&old), Err(QueueTokenError::Expired));
        // An expired forgery is invalid, not expired: the signature is checked first.
        let old_forged = other.pass(a_pass(later(-1).timestamp())).unwrap();
        assert_eq!(
            tokens.verify_pass(&old_forged),
            Err(QueueTokenError::Invalid)
        );
    }

    #[test]
    fn shopper_tokens_and_queue_tokens_never_stand_in_for_each_other() {
        let rules = TokenRules {
            ttl: Duration::from_secs(60),
            max_lifetime: Duration::from_secs(3_600),
            issuer: None,
            audience: None,
        };
        // Even signed with the same secret (which production refuses), the kinds differ.
        let secret = SecretString::from("one-secret-for-both-in-this-test");
        let shopper = TokenKeys::new(&secret, rules).unwrap();
        let queue = QueueTokens::new(&secret).unwrap();
        let bearer = shopper.issue(user(7)).unwrap().token;
        assert_eq!(queue.verify_pass(&bearer), Err(QueueTokenError::Invalid));
        assert_eq!(queue.verify_ticket(&bearer), Err(QueueTokenError::Invalid));
        let pass = queue.pass(a_pass(later(60).timestamp())).unwrap();
        let ticket = queue
            .ticket(
                Ticket {
                    user: user(7),
                    item: 3,
                    index: 1,
                },
                later(60),
            )
            .unwrap();
        assert!(shopper.verify(&pass).is_err());
        assert!(shopper.verify(&ticket).is_err());
    }
}
