//! The waiting room from a shopper's side: the room turned on through the admin API, a
//! shopper's three requests (join, poll, buy with the pass) and what they answered. The
//! waiting room's bench and loadgen's room mode both send them through here.

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::client::Failure;
use crate::ledger::Record;

/// A room's settings, as an operator sets them.
#[derive(Debug, Clone, Copy, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomSettings {
    /// `random` order, else `fifo`.
    pub random: bool,
    /// When the pre-queue opens (before the sale's start); `None`: no pre-queue.
    pub prequeue_from: Option<DateTime<Utc>>,
    pub admit_per_second: u32,
    pub max_active: u32,
    pub pass_ttl_secs: u32,
    pub abandon_after_secs: u32,
}

/// Turns `item`'s room on with these settings (`PUT /admin/api/items/{item}/waiting-room`
/// on `target`).
pub async fn set_room(
    client: &reqwest::Client,
    target: &str,
    admin_token: &str,
    item: i64,
    settings: &RoomSettings,
) -> anyhow::Result<()> {
    let settings = serde_json::json!({
        "enabled": true,
        "order": if settings.random { "random" } else { "fifo" },
        "prequeueStartsAt": settings.prequeue_from,
        "admitPerSecond": settings.admit_per_second,
        "maxActive": settings.max_active,
        "passTtlSecs": settings.pass_ttl_secs,
        "abandonAfterSecs": settings.abandon_after_secs,
    });
    let response = client
        .put(format!("{target}/admin/api/items/{item}/waiting-room"))
        .bearer_auth(admin_token)
        .json(&settings)
        .send()
        .await
        .context("setting the waiting room")?;
    let status = response.status();
    anyhow::ensure!(
        status == 200,
        "setting the waiting room: {status} {}",
        response.text().await.unwrap_or_default()
    );
    Ok(())
}

/// How a shopper's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ending {
    Bought,
    /// Answered 202 `ORDER_PENDING`: the order may yet land.
    Pending,
    /// Admitted, and (as told) never bought.
    Admitted,
    SoldOut,
    /// The place was skipped, or the pass refused (403) or over.
    Expired,
    Closed,
    /// Every attempt refused, or an answer no shopper can go on from.
    GaveUp,
    /// Still waiting (or trying) at the run's deadline.
    Deadline,
}

impl Ending {
    pub fn label(self) -> &'static str {
        match self {
            Self::Bought => "bought",
            Self::Pending => "pending",
            Self::Admitted => "admitted",
            Self::SoldOut => "sold_out",
            Self::Expired => "expired",
            Self::Closed => "closed",
            Self::GaveUp => "gave_up",
            Self::Deadline => "deadline",
        }
    }
}

/// Who sends a shopper's request: its bearer token and its `X-Forwarded-For` address.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub token: &'a str,
    pub ip: &'a str,
}

/// Where a join or a poll says the shopper stands (the app's `QueueBody`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Standing {
    pub state: String,
    pub position: Option<u64>,
    pub ahead: Option<u64>,
    pub refresh_interval_seconds: Option<u64>,
    pub ticket: Option<String>,
    pub pass: Option<String>,
}

/// An answer, or why none came.
#[derive(Debug, Clone)]
pub struct Answer {
    /// When it was sent and answered, from the run's start.
    pub sent: Duration,
    pub received: Duration,
    /// 0 when no answer came (`failure` says why).
    pub status: u16,
    pub body: serde_json::Value,
    pub failure: Option<Failure>,
    /// The limiter admitted the request (see `ledger`).
    pub admitted: bool,
}

impl Answer {
    pub fn code(&self) -> Option<&str> {
        self.body["code"].as_str()
    }

    /// A refusal's own wait (`retryAfterMs`).
    pub fn retry_after(&self) -> Option<Duration> {
        self.body["retryAfterMs"]
            .as_u64()
            .map(Duration::from_millis)
    }

    pub fn standing(&self) -> Option<Standing> {
        (self.status == 200)
            .then(|| serde_json::from_value(self.body.clone()).ok())
            .flatten()
    }

    /// No connection could be made: the instance is gone, try another.
    pub fn unreachable(&self) -> bool {
        self.failure == Some(Failure::Connect)
    }

    /// A purchase's answer as the ledger keeps it, sent by `user` from address index
    /// `ip` to target `target`.
    pub fn record(&self, target: usize, user: i64, ip: u32) -> Record {
        Record {
            target,
            user,
            ip,
            sent: self.sent,
            received: self.received,
            status: self.status,
            code: self.code().map(str::to_string),
            dimension: self.body["dimension"].as_str().map(str::to_string),
            admitted: self.admitted,
            failure: self.failure,
            order_id: self.body["orderId"].as_str().map(str::to_string),
        }
    }
}

/// `POST {base}/api/items/{item}/queue`: the join.
pub fn join(client: &reqwest::Client, base: &str, item: i64) -> reqwest::RequestBuilder {
    client.post(format!("{base}/api/items/{item}/queue"))
}

/// `GET {base}/api/items/{item}/queue` with the ticket: a poll.
pub fn poll(
    client: &reqwest::Client,
    base: &str,
    item: i64,
    ticket: &str,
) -> reqwest::RequestBuilder {
    client
        .get(format!("{base}/api/items/{item}/queue"))
        .header("Queue-Ticket", ticket)
}

/// `POST {base}/seckill`, with the pass when there is one.
pub fn buy(
    client: &reqwest::Client,
    base: &str,
    item: i64,
    pass: Option<&str>,
) -> reqwest::RequestBuilder {
    let request = client
        .post(format!("{base}/seckill"))
        .json(&serde_json::json!({ "itemId": item }));
    match pass {
        Some(pass) => request.header("Queue-Pass", pass),
        None => request,
    }
}

/// Sends `request` as `who`, timed from `start`.
pub async fn send(request: reqwest::RequestBuilder, who: Caller<'_>, start: Instant) -> Answer {
    let sent = start.elapsed();
    let response = request
        .bearer_auth(who.token)
        .header("X-Forwarded-For", who.ip)
        .send()
        .await;
    let mut answer = Answer {
        sent,
        received: sent,
        status: 0,
        body: serde_json::Value::Null,
        failure: None,
        admitted: false,
    };
    match response {
        Ok(response) => {
            let status = response.status().as_u16();
            let admitted =
                status != 429 && response.headers().contains_key("x-ratelimit-remaining");
            match response.bytes().await {
                Ok(body) => {
                    answer.status = status;
                    answer.admitted = admitted;
                    answer.body = serde_json::from_slice(&body).unwrap_or_default();
                }
                Err(e) => answer.failure = Some(Failure::of(&e).or_lost()),
            }
        }
        Err(e) => answer.failure = Some(Failure::of(&e)),
    }
    answer.received = start.elapsed();
    answer
}
