//! The waiting room as the HTTP layer sees it: join, poll, check a pass, and the
//! operators' settings and figures. Everything else in `sale::room` is behind this.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::lobby::{Held, Lobby};
use super::room_config::{RoomConfig, RoomEdit};
use super::room_error::RoomError;
use super::room_redis::{RoomMoment, RoomRedis};
use super::rooms::Rooms;
use super::standing::{standing, Situation, Standing};
use crate::domain::{ClientIp, UserId};
use crate::identity::{Pass, QueueTokenError, QueueTokens, Ticket};
use crate::sale::item::{Item, ItemId};
use crate::sale::parts::SaleParts;
use crate::sale::stock::{RoomGate, RoomGates};
use crate::sale::SaleError;
use crate::vocabulary::{ClosedReason, Outcome, PassOutcome, QueueState};

/// What a purchase's `Queue-Pass` header offered ([`WaitingRoom::check_pass`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OfferedPass {
    /// No header.
    None,
    /// A pass for this user and item, unexpired: its place.
    Valid(u64),
    /// A header that is no such pass: expired, or forged, someone else's, another
    /// item's, a ticket.
    Invalid(PassOutcome),
}

impl OfferedPass {
    /// The place the reservation script is told of: a valid pass's, or none.
    pub fn place(self) -> Option<u64> {
        match self {
            Self::Valid(place) => Some(place),
            _ => None,
        }
    }
}

/// How long a shopper waits between two polls. Above the server's keep-alive (5 s), so
/// a waiting crowd holds no connection between polls.
pub const POLL_EVERY_SECS: u64 = 6;

/// A join's or a poll's answer.
pub struct Answer {
    /// Where the shopper stands.
    pub standing: Standing,
    /// The ticket (a join's answer only).
    pub ticket: Option<String>,
    /// The pass, when admitted.
    pub pass: Option<String>,
    /// A join's answer only: whether the user had joined before, so the answer is the
    /// place kept for them (a shopper back in a new tab is told so).
    pub rejoined: Option<bool>,
    /// The operator's message to everyone waiting, when the room has one.
    pub message: Option<String>,
}

/// An operator's view of a room: its settings and what it is doing.
pub struct RoomStatus {
    /// The room's settings in force.
    pub room: Arc<RoomConfig>,
    /// Shoppers who ever joined.
    pub joined: u64,
    /// Joined and not yet reached by the serving position; 0 once the room closed for good.
    pub waiting: u64,
    /// The serving position: places below it were admitted or skipped.
    pub serving: u64,
    /// Places admitted.
    pub admitted: u64,
    /// Passes admitted, neither used nor expired.
    pub live_passes: u64,
    /// Places skipped because their shopper went quiet.
    pub abandoned: u64,
    /// Places admitted over the last minute, from the steps.
    pub admitted_last_minute: u64,
    /// The sold-out board says so.
    pub sold_out: bool,
    /// When the room closed for good (ms): sold out, no unit can come back.
    pub closed_at_ms: Option<i64>,
}

/// The waiting room: one per process, shared by every worker; its state is in Redis and
/// Postgres, so every instance answers alike.
pub struct WaitingRoom {
    parts: SaleParts,
    rooms: Arc<Rooms>,
    lobby: Arc<Lobby>,
    redis: Arc<RoomRedis>,
    tokens: Arc<QueueTokens>,
}

impl WaitingRoom {
    /// The room over the sale's parts, its settings, this instance's copies, its scripts
    /// and the ticket signer.
    pub fn new(
        parts: SaleParts,
        rooms: Arc<Rooms>,
        lobby: Arc<Lobby>,
        redis: Arc<RoomRedis>,
        tokens: Arc<QueueTokens>,
    ) -> Self {
        Self {
            parts,
            rooms,
            lobby,
            redis,
            tokens,
        }
    }

    fn item(&self, item: ItemId) -> Result<Arc<Item>, RoomError> {
        self.parts
            .catalog
            .get(item)
            .ok_or(RoomError::Sale(SaleError::ItemNotFound))
    }

    /// Joins `user` to `item`'s queue, or answers their place again.
    pub async fn join(
        &self,
        item_id: ItemId,
        user: UserId,
        from: ClientIp,
    ) -> Result<Answer, RoomError> {
        let item = self.item(item_id)?;
        let room = self.rooms.get(item_id);
        let now = Utc::now();
        if !room.enabled || now >= item.ends_at {
            return Err(RoomError::Closed);
        }
        let opens_at = room.opens_at(item.starts_at);
        if now < opens_at {
            return Err(RoomError::NotOpen(opens_at));
        }
        // A room this copy saw closed asks Redis all the same: a stock raise on another
        // instance may have reopened it (the join script decides).
        let seen_closed = self
            .lobby
            .held(item_id)
            .is_some_and(|held| held.view.counters.closed_at_ms.is_some());
        if self.parts.sold_out.is_sold_out(item_id) && !seen_closed {
            return Err(RoomError::Sale(SaleError::SoldOut));
        }
        let joined = self
            .redis
            .join(
                item_id,
                user,
                &RoomMoment::of(
                    &item,
                    room.order,
                    self.parts.lifetime,
                    now.timestamp_millis(),
                ),
            )
            .await
            .map_err(RoomError::Unavailable)?
            .ok_or(RoomError::RoomClosed)?;
        if joined.new {
            let metrics = &self.parts.metrics;
            metrics.queue_joins.inc();
            metrics
                .tally
                .items
                .count(item_id.get(), |cells| cells.joined());
            metrics
                .tally
                .refusals
                .joined(item_id.get(), user.get(), from.addr());
            self.lobby
                .joined(item_id, joined.index, now.timestamp_millis());
        }
        let ticket = Ticket {
            user,
            item: item_id.get(),
            index: joined.index,
        };
        let signed = self
            .tokens
            .ticket(ticket, item.ends_at)
            .map_err(RoomError::Unavailable)?;
        let held = self.lobby.held(item_id).map(|held| {
            if held.view.counters.closed_at_ms.is_none() {
                return held;
            }
            // The script, which decides, found the room open (a stock raise reopened
            // it): this copy's close is behind by a refresh at most.
            let mut reopened = Held::clone(&held);
            reopened.view.counters.closed_at_ms = None;
            Arc::new(reopened)
        });
        // A fifo join the lobby's copy may not have seen yet: its index is its place.
        let given = joined.placed.then_some(joined.index);
        let mut answer = self.stand(&item, &room, held.as_deref(), user, joined.index, given);
        answer.ticket = Some(signed);
        answer.rejoined = Some(!joined.new);
        Ok(answer)
    }

    /// Where the holder of `ticket` stands. Costs no Redis call: the answer comes from
    /// the lobby's copy, and the poll joins the next liveness batch.
    pub fn poll(&self, item_id: ItemId, user: UserId, ticket: &str) -> Result<Answer, RoomError> {
        let ticket = match self.tokens.verify_ticket(ticket) {
            Ok(ticket) if ticket.is_for(user, item_id.get()) => ticket,
            // A ticket lives until the sale's end: an expired one is a closed room.
            Err(QueueTokenError::Expired) => {
                let item = self.item(item_id)?;
                let room = self.rooms.get(item_id);
                return Ok(self.closed(&item, &room, user));
            }
            _ => return Err(RoomError::InvalidTicket),
        };
        let item = self.item(item_id)?;
        let room = self.rooms.get(item_id);
        let held = self.lobby.held(item_id);
        let answer = self.stand(&item, &room, held.as_deref(), user, ticket.index, None);
        if answer.standing.state != QueueState::Closed {
            self.lobby.heard(item_id, ticket.index);
        }
        Ok(answer)
    }

    /// A ticket past its expiry: it lives until the sale's end, so the sale has ended.
    fn closed(&self, item: &Item, room: &RoomConfig, user: UserId) -> Answer {
        let ended = RoomConfig {
            enabled: false,
            ..room.clone()
        };
        let mut answer = self.stand(item, &ended, None, user, 0, None);
        answer.standing.closed = Some((ClosedReason::Ended, Some(item.ends_at.timestamp_millis())));
        answer
    }

    fn stand(
        &self,
        item: &Item,
        room: &RoomConfig,
        held: Option<&Held>,
        user: UserId,
        index: u64,
        given: Option<u64>,
    ) -> Answer {
        let empty = super::room_view::RoomView::default();
        let now_ms = Utc::now().timestamp_millis();
        let sale_starts_ms = item.starts_at.timestamp_millis();
        let situation = Situation {
            view: held.map(|h| &h.view).unwrap_or(&empty),
            // Before the sale's start there is nothing to be behind on.
            stale: now_ms >= sale_starts_ms && held.is_none_or(Held::is_stale),
            room,
            sale_starts_ms,
            sale_ends_ms: item.ends_at.timestamp_millis(),
            sold_out: self.parts.sold_out.is_sold_out(item.id),
            now_ms,
        };
        let standing = standing(&situation, index, given);
        let pass = match (standing.place, standing.pass_expires_ms) {
            (Some(place), Some(expires_ms)) => {
                let pass = Pass {
                    user,
                    item: item.id.get(),
                    place,
                    // A JWT is accepted through the whole second of its `exp`: the
                    // second before the (whole-second) expiry is the last valid one.
                    expires_at: expires_ms.div_euclid(1_000) - 1,
                };
                match self.tokens.pass(pass) {
                    Ok(signed) => Some(signed),
                    Err(e) => {
                        tracing::error!(error = %format!("{e:#}"), "could not sign a queue pass");
                        None
                    }
                }
            }
            _ => None,
        };
        Answer {
            standing,
            ticket: None,
            pass,
            rejoined: None,
            message: (!room.message.is_empty()).then(|| room.message.clone()),
        }
    }

    /// What `header` offers for `user`'s purchase of `item`, checked in process
    /// whenever it is sent: signature, kind, expiry, user, item. It refuses nothing:
    /// whether the item needs a pass is the reservation script's to decide, from the
    /// room gate in Redis, so neither a copy of the settings a second old nor a room
    /// turned on or off on another instance can let a bare purchase through or turn a
    /// shopper away. The reservation spends the pass, so a refusal leaves it usable.
    pub fn check_pass(&self, item: ItemId, user: UserId, header: Option<&str>) -> OfferedPass {
        match header.map(|token| self.tokens.verify_pass(token)) {
            None => OfferedPass::None,
            Some(Ok(pass)) if pass.is_for(user, item.get()) => OfferedPass::Valid(pass.place),
            Some(Err(QueueTokenError::Expired)) => OfferedPass::Invalid(PassOutcome::Expired),
            Some(_) => OfferedPass::Invalid(PassOutcome::Refused),
        }
    }

    /// Counts what became of the pass `offered` by a purchase that ended in `outcome`:
    /// used when it bought, refused or expired when the gate asked for one.
    pub fn count_pass(&self, offered: OfferedPass, outcome: Outcome) {
        let counted = match (offered, outcome) {
            (OfferedPass::Valid(_), Outcome::Created) => Some(PassOutcome::Used),
            (OfferedPass::Invalid(why), Outcome::NotAdmitted) => Some(why),
            (OfferedPass::None, Outcome::NotAdmitted) => Some(PassOutcome::Refused),
            _ => None,
        };
        if let Some(counted) = counted {
            self.parts
                .metrics
                .queue_passes
                .with_label_values(&[counted.label()])
                .inc();
        }
    }

    /// The room's settings (the defaults, off, when it was never set). A stored row this
    /// build cannot read is an error here, for the operator, while the shoppers' side
    /// goes on with the settings it had (`rooms`).
    pub fn settings(&self, item: ItemId) -> Result<Arc<RoomConfig>, RoomError> {
        self.item(item)?;
        if let Some(unreadable) = self.rooms.unreadable(item) {
            return Err(RoomError::Unavailable(unreadable.into()));
        }
        Ok(self.rooms.get(item))
    }

    /// Applies an operator's edit, recorded in the item's history as `by`'s. A
    /// concurrent edit makes it read and merge again.
    pub async fn configure(
        &self,
        item_id: ItemId,
        edit: &RoomEdit,
        by: &str,
    ) -> Result<Arc<RoomConfig>, RoomError> {
        let item = self.item(item_id)?;
        for _ in 0..3 {
            let mut current = self.rooms.get(item_id);
            if let Some(unreadable) = self.rooms.unreadable(item_id) {
                if edit.order.is_none() {
                    return Err(RoomError::Unavailable(unreadable.into()));
                }
                // An edit that names the order replaces the unreadable row (over its
                // version); its other settings start from the ones this instance had.
                current = Arc::new(RoomConfig {
                    version: unreadable.version,
                    ..RoomConfig::clone(&current)
                });
            }
            let next = current.edited(edit, item.starts_at)?;
            match self
                .rooms
                .save(item_id, &current, &next, by)
                .await
                .map_err(RoomError::Unavailable)?
            {
                Some(saved) => {
                    self.set_gate(&item, &saved).await?;
                    return Ok(Arc::new(saved));
                }
                None => self.rooms.reload().await.map_err(RoomError::Unavailable)?,
            }
        }
        Err(RoomError::Unavailable(anyhow::anyhow!(
            "the waiting room kept changing under the edit"
        )))
    }

    /// Puts a saved change in force: the item's room gate, which the reservation script
    /// reads, before the operator's 200. If Redis does not answer, the change is stored
    /// but not yet in force: 503, and the reconciler's next round sets the gate from
    /// Postgres (an operator may also send the edit again).
    async fn set_gate(&self, item: &Item, saved: &RoomConfig) -> Result<(), RoomError> {
        let gate = RoomGate {
            version: saved.version,
            on: saved.enabled,
        };
        RoomGates::new(self.parts.redis.clone(), self.parts.lifetime)
            .set(item, gate)
            .await
            .map(drop)
            .map_err(RoomError::Unavailable)
    }

    /// The settings and the figures, from this instance's copy.
    pub fn status(&self, item_id: ItemId) -> Result<RoomStatus, RoomError> {
        let room = self.settings(item_id)?;
        let held = self.lobby.held(item_id);
        let view = held.as_ref().map(|h| &h.view);
        let counters = view.map(|v| v.counters.clone()).unwrap_or_default();
        let minute_ago = Utc::now().timestamp_millis() - 60_000;
        let admitted_last_minute = view
            .map(|v| {
                v.steps
                    .iter()
                    .rev()
                    .take_while(|s| s.at_ms >= minute_ago)
                    .map(|s| s.admitted())
                    .sum()
            })
            .unwrap_or(0);
        Ok(RoomStatus {
            room,
            joined: counters.joined,
            waiting: counters.waiting(),
            serving: counters.serving,
            admitted: counters.admitted,
            live_passes: view.map(|v| v.live).unwrap_or(0),
            abandoned: counters.skipped,
            admitted_last_minute,
            sold_out: self.parts.sold_out.is_sold_out(item_id),
            closed_at_ms: counters.closed_at_ms,
        })
    }

    /// When `item`'s queue opens, for the listing (`None`: no room on).
    pub fn opens_at(&self, item: &Item) -> Option<DateTime<Utc>> {
        let room = self.rooms.get(item.id);
        room.enabled.then(|| room.opens_at(item.starts_at))
    }
}
