//! Room mode's shoppers (see `room`): each joins the queue, polls it at the plan's pace
//! (later when a 429 says so), and once admitted buys with its pass until an answer
//! settles it. Their purchases go to the run's ledger; what the room answered them goes
//! to [`RoomSeen`].

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use loadtest_core::client::ip_of;
use loadtest_core::ledger::Record;
use loadtest_core::room::{self, Answer, Caller, Ending};
use loadtest_core::setup::login;

/// A shopper: a user of its own, its token, an address of its own, the instance it
/// talks to first.
pub(crate) struct Shopper {
    user: i64,
    token: String,
    ip: String,
    ip_index: u32,
    home: usize,
}

/// `shoppers` shoppers, users from `first_user` and addresses from `first_ip`, each
/// logged in on `session_target`; homes round-robin over `targets` instances.
pub(crate) async fn log_in(
    client: &reqwest::Client,
    session_target: &str,
    targets: usize,
    shoppers: u32,
    first_user: i64,
    first_ip: u32,
) -> anyhow::Result<Vec<Shopper>> {
    let users = (0..shoppers).map(|i| first_user + i64::from(i));
    let mut tokens = login(client, session_target, users).await?;
    (0..shoppers)
        .map(|i| {
            let user = first_user + i64::from(i);
            let token = tokens
                .remove(&user)
                .ok_or_else(|| anyhow::anyhow!("no token for user {user}"))?;
            let ip_index = first_ip.wrapping_add(i);
            Ok(Shopper {
                user,
                token,
                ip: ip_of(ip_index),
                ip_index,
                home: i as usize % targets.max(1),
            })
        })
        .collect()
}

/// What the room answered the shoppers, as they saw it.
#[derive(Debug, Default)]
pub(crate) struct RoomSeen {
    pub(crate) joins: BTreeMap<String, u64>,
    pub(crate) polls: BTreeMap<String, u64>,
    /// Users whose join answered a ticket.
    pub(crate) joined: HashSet<i64>,
    /// Users handed a pass (by a poll, or the join).
    pub(crate) admitted: HashSet<i64>,
    pub(crate) endings: BTreeMap<String, u64>,
}

impl RoomSeen {
    /// Shoppers whose join answered a ticket.
    pub(crate) fn joined(&self) -> u64 {
        self.joined.len() as u64
    }

    /// Shoppers handed a pass.
    pub(crate) fn admitted(&self) -> u64 {
        self.admitted.len() as u64
    }

    /// The report's `room`, of `shoppers` shoppers of whom `bought` bought.
    pub(crate) fn report(&self, shoppers: u32, bought: u64) -> RoomReport {
        RoomReport {
            shoppers: u64::from(shoppers),
            joined: self.joined(),
            admitted: self.admitted(),
            bought,
            joins: self.joins.clone(),
            polls: self.polls.clone(),
            endings: self.endings.clone(),
        }
    }
}

/// The room as the shoppers saw it.
#[derive(Debug, Serialize)]
pub struct RoomReport {
    /// Shoppers sent through the room.
    pub shoppers: u64,
    /// Shoppers whose join answered a ticket.
    pub joined: u64,
    /// Shoppers handed a pass (a poll, or the join, answered `admitted` with one).
    pub admitted: u64,
    /// Shoppers whose purchase with their pass answered 200.
    pub bought: u64,
    /// The joins' answers: `200 <state>`, else the status and code, or `error …`.
    pub joins: BTreeMap<String, u64>,
    /// The polls' answers, keyed as the joins'.
    pub polls: BTreeMap<String, u64>,
    /// How the shoppers' runs ended: `bought`, `pending`, `sold_out`, `expired`,
    /// `closed`, `gave_up`, `deadline`.
    pub endings: BTreeMap<String, u64>,
}

/// A join's or a poll's answer as the room's ledger keys it: `200 <state>`, else the
/// status and code (`429 POLLING_TOO_FAST`), or why no answer came.
fn key(answer: &Answer) -> String {
    match answer.standing() {
        Some(standing) => format!("200 {}", standing.state),
        None => answer.record(0, 0, 0).answer(),
    }
}

/// Everything a shopper's task shares.
pub(crate) struct Trip {
    pub(crate) client: reqwest::Client,
    pub(crate) targets: Vec<String>,
    pub(crate) item: i64,
    pub(crate) poll_every: Duration,
    pub(crate) start: Instant,
    pub(crate) deadline: Instant,
    /// The run's ledger: the shoppers' purchases go where the load's go.
    pub(crate) ledger: Arc<Mutex<Vec<Record>>>,
    pub(crate) seen: Mutex<RoomSeen>,
}

impl Trip {
    fn note(&self, f: impl FnOnce(&mut RoomSeen)) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut seen);
    }

    async fn send(&self, request: reqwest::RequestBuilder, who: &Shopper) -> Answer {
        let caller = Caller {
            token: &who.token,
            ip: &who.ip,
        };
        room::send(request, caller, self.start).await
    }

    /// Sleeps `pause`, unless that passes the deadline: then answers false at once.
    async fn rest(&self, pause: Duration) -> bool {
        let until = Instant::now() + pause;
        if until >= self.deadline {
            return false;
        }
        tokio::time::sleep_until(until.into()).await;
        true
    }

    fn next(&self, target: usize) -> usize {
        (target + 1) % self.targets.len()
    }

    /// One shopper, from the join to the purchase (or whatever ends it first).
    async fn shop(&self, who: &Shopper) -> Ending {
        let mut target = who.home;
        // The join, retried while a limit refuses or nothing answers.
        let mut standing = loop {
            let request = room::join(&self.client, &self.targets[target], self.item);
            let answer = self.send(request, who).await;
            self.note(|seen| *seen.joins.entry(key(&answer)).or_default() += 1);
            if let Some(standing) = answer.standing() {
                if standing.ticket.is_none() {
                    return Ending::GaveUp;
                }
                self.note(|seen| {
                    seen.joined.insert(who.user);
                });
                break standing;
            }
            let pause = match (answer.status, answer.code()) {
                (409, Some("SOLD_OUT")) => return Ending::SoldOut,
                (409, Some("QUEUE_NOT_OPEN")) => Duration::from_millis(200),
                (409 | 404, _) => return Ending::Closed,
                (429, _) => answer.retry_after().unwrap_or(Duration::from_secs(1)),
                _ => {
                    if answer.unreachable() {
                        target = self.next(target);
                    }
                    Duration::from_millis(200)
                }
            };
            if !self.rest(pause).await {
                return Ending::Deadline;
            }
        };
        let ticket = standing.ticket.clone().unwrap_or_default();
        loop {
            match standing.state.as_str() {
                "sold_out" => return Ending::SoldOut,
                "expired" => return Ending::Expired,
                "closed" => return Ending::Closed,
                // A stale copy hands out no pass: poll again.
                "admitted" if standing.pass.is_some() => {
                    let pass = standing.pass.take().unwrap_or_default();
                    self.note(|seen| {
                        seen.admitted.insert(who.user);
                    });
                    return self.buy(who, target, &pass).await;
                }
                _ => {}
            }
            // The next poll, at the plan's pace, or later when the budget says so.
            let mut pause = self.poll_every;
            standing = loop {
                if !self.rest(pause).await {
                    return Ending::Deadline;
                }
                let request = room::poll(&self.client, &self.targets[target], self.item, &ticket);
                let answer = self.send(request, who).await;
                self.note(|seen| *seen.polls.entry(key(&answer)).or_default() += 1);
                if let Some(standing) = answer.standing() {
                    break standing;
                }
                pause = match answer.status {
                    429 => answer.retry_after().unwrap_or(Duration::from_secs(1)),
                    403 | 404 => return Ending::GaveUp,
                    _ => {
                        if answer.unreachable() {
                            target = self.next(target);
                        }
                        self.poll_every
                    }
                };
            };
        }
    }

    /// Purchases with the pass until an answer settles it.
    async fn buy(&self, who: &Shopper, mut target: usize, pass: &str) -> Ending {
        loop {
            let request = room::buy(&self.client, &self.targets[target], self.item, Some(pass));
            let answer = self.send(request, who).await;
            let record = answer.record(target, who.user, who.ip_index);
            if let Ok(mut ledger) = self.ledger.lock() {
                ledger.push(record);
            }
            let pause = match (answer.status, answer.code()) {
                (200, _) | (409, Some("ALREADY_PURCHASED")) => return Ending::Bought,
                (202, _) => return Ending::Pending,
                (409, Some("SOLD_OUT" | "SALE_ENDED")) => return Ending::SoldOut,
                (403, _) => return Ending::Expired,
                (409 | 404 | 400, _) => return Ending::GaveUp,
                (429, _) => answer.retry_after().unwrap_or(Duration::from_secs(1)),
                _ => {
                    if answer.unreachable() {
                        target = self.next(target);
                    }
                    Duration::from_millis(100)
                }
            };
            if !self.rest(pause).await {
                return Ending::Deadline;
            }
        }
    }
}

/// Every shopper on a task of its own until each is done or the deadline passed;
/// what the room answered them.
pub(crate) async fn run(trip: Arc<Trip>, shoppers: Vec<Shopper>) -> anyhow::Result<RoomSeen> {
    let tasks: Vec<_> = shoppers
        .into_iter()
        .map(|who| {
            let trip = Arc::clone(&trip);
            tokio::spawn(async move { trip.shop(&who).await })
        })
        .collect();
    for task in tasks {
        let ending = task.await?;
        trip.note(|seen| *seen.endings.entry(ending.label().into()).or_default() += 1);
    }
    let mut seen = trip.seen.lock().unwrap_or_else(|p| p.into_inner());
    Ok(std::mem::take(&mut *seen))
}
