//! One shopper's requests: join the room, poll it, buy (with the pass, or without a room
//! at all), each sent as the account (its bearer token, its own address), timed from the
//! run's start, and written to what the run saw.

use std::time::{Duration, Instant};

use serde::Deserialize;

use loadtest_core::room::{self, Caller};
pub use loadtest_core::room::{Answer, Standing};

use crate::crowd::Account;
use crate::seen::{Bought, Joined, PassClaims, Polled, Seen, State};
use crate::site::Site;

/// What every shopper of one run shares.
pub struct Run {
    pub site: Site,
    pub item: i64,
    /// The instant every time of the run counts from.
    pub start: Instant,
    /// The same instant on the wall clock (Unix ms), to read passes' expiries by.
    pub start_unix_ms: i64,
    pub seen: Seen,
}

impl Run {
    /// A run starting now; polls that say `waiting` are kept when `keep_waiting`.
    pub fn new(site: Site, item: i64, keep_waiting: bool) -> Self {
        Self {
            site,
            item,
            start: Instant::now(),
            start_unix_ms: chrono::Utc::now().timestamp_millis(),
            seen: Seen::new(keep_waiting),
        }
    }

    /// Unix ms of an offset from the run's start.
    pub fn unix_ms(&self, offset: Duration) -> i64 {
        self.start_unix_ms + offset.as_millis() as i64
    }

    fn client(&self, fresh: bool) -> &reqwest::Client {
        if fresh {
            &self.site.fresh
        } else {
            &self.site.client
        }
    }

    fn base(&self, target: usize) -> &str {
        &self.site.targets[target]
    }

    async fn send(&self, request: reqwest::RequestBuilder, who: &Account) -> Answer {
        let caller = Caller {
            token: &who.token,
            ip: &who.ip,
        };
        room::send(request, caller, self.start).await
    }

    /// `POST /api/items/{item}/queue`.
    pub async fn join(&self, who: &Account, target: usize, fresh: bool) -> Answer {
        let request = room::join(self.client(fresh), self.base(target), self.item);
        let answer = self.send(request, who).await;
        self.seen.joined(Joined {
            sent: answer.sent,
            received: answer.received,
            status: answer.status,
            position: answer.standing().and_then(|s| s.position),
        });
        answer
    }

    /// `GET /api/items/{item}/queue` with the ticket.
    pub async fn poll(&self, who: &Account, target: usize, ticket: &str, fresh: bool) -> Answer {
        let request = room::poll(self.client(fresh), self.base(target), self.item, ticket);
        let answer = self.send(request, who).await;
        let standing = answer.standing();
        self.seen.polled(Polled {
            user: who.user,
            sent: answer.sent,
            received: answer.received,
            state: standing
                .as_ref()
                .map_or(State::Failed, |s| State::parse(&s.state)),
            position: standing.as_ref().and_then(|s| s.position),
            ahead: standing.as_ref().and_then(|s| s.ahead),
            pass: standing
                .as_ref()
                .and_then(|s| s.pass.as_deref())
                .and_then(pass_claims),
        });
        answer
    }

    /// `POST /seckill`, with the pass when there is one.
    pub async fn buy(
        &self,
        who: &Account,
        target: usize,
        pass: Option<&str>,
        fresh: bool,
    ) -> Answer {
        let request = room::buy(self.client(fresh), self.base(target), self.item, pass);
        let answer = self.send(request, who).await;
        self.seen.bought(Bought {
            target,
            holder: who.holder,
            record: answer.record(target, who.user, who.ip_index),
        });
        answer
    }
}

/// The user and place a pass names: its payload's `sub` and `number`.
pub fn pass_claims(pass: &str) -> Option<PassClaims> {
    #[derive(Deserialize)]
    struct Claims {
        sub: String,
        number: u64,
        exp: i64,
    }
    let payload = base64url(pass.split('.').nth(1)?)?;
    let claims: Claims = serde_json::from_slice(&payload).ok()?;
    Some(PassClaims {
        user: claims.sub.parse().ok()?,
        place: claims.number,
        expires_at: claims.exp,
    })
}

/// Unpadded base64url, as JWTs carry their parts.
fn base64url(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut held) = (0u32, 0u32);
    for c in text.bytes() {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(value);
        held += 6;
        if held >= 8 {
            held -= 8;
            out.push((bits >> held) as u8);
            bits &= (1 << held) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_names_its_user_and_place() {
        // {"typ":"seckill-queue-pass","sub":"42","number":7,"exp":1800000000}
        let payload = "eyJ0eXAiOiJzZWNraWxsLXF1ZXVlLXBhc3MiLCJzdWIiOiI0MiIsIm51bWJlciI6NywiZXhwIjoxODAwMDAwMDAwfQ";
        let pass = format!("e30.{payload}.sig");
        let claims = PassClaims {
            user: 42,
            place: 7,
            expires_at: 1_800_000_000,
        };
        assert_eq!(pass_claims(&pass), Some(claims));
        assert_eq!(pass_claims("not a jwt"), None);
        assert_eq!(base64url("aGk").as_deref(), Some(&b"hi"[..]));
    }
}
