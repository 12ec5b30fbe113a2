//! A waiting room's settings, as operators set them per item (`PUT
//! /admin/api/items/{id}/waiting-room`): parsed and bounded once, here.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::vocabulary::RoomOrder;

/// An item's waiting room. Off by default: without one, the sale behaves as before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomConfig {
    /// Whether purchases of the item need a pass from the room.
    pub enabled: bool,
    /// How joiners are placed: in the order they joined, or drawn.
    pub order: RoomOrder,
    /// When joining opens; `None`: at the sale's start (no pre-queue).
    pub prequeue_starts_at: Option<DateTime<Utc>>,
    /// Places the inlet admits a second at most.
    pub admit_per_second: u32,
    /// Admitted places whose pass is neither used nor expired, at most.
    pub max_active: u32,
    /// How long a pass stays valid after its place is admitted.
    pub pass_ttl: Duration,
    /// A shopper who has not polled for this long loses the place.
    pub abandon_after: Duration,
    /// The operator's message to everyone waiting, shown as text on their next poll;
    /// empty: none. At most [`MESSAGE_MAX_CHARS`] characters.
    pub message: String,
    /// Bumped by every change.
    pub version: i64,
}

/// A room's settings in the API's spelling: the admin's read of a room and the item
/// history's `room` entries (before and after) both show them so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoomSettings {
    /// Whether purchases need a pass.
    pub enabled: bool,
    /// `fifo` or `random`.
    #[schema(example = "fifo")]
    pub order: &'static str,
    /// When joining opens; `null`: at the sale's start.
    pub prequeue_starts_at: Option<DateTime<Utc>>,
    /// Places admitted a second at most.
    pub admit_per_second: u32,
    /// Live passes at most.
    pub max_active: u32,
    /// How long a pass lasts.
    pub pass_ttl_secs: u64,
    /// A shopper not heard of for this long loses the place.
    pub abandon_after_secs: u64,
    /// The operator's message to everyone waiting; `""`: none.
    pub message: String,
}

/// The longest message an operator can post to a room, in characters (the column's
/// CHECK says the same).
pub const MESSAGE_MAX_CHARS: usize = 200;

impl Default for RoomConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            order: RoomOrder::Fifo,
            prequeue_starts_at: None,
            admit_per_second: 50,
            max_active: 500,
            pass_ttl: Duration::from_secs(120),
            abandon_after: Duration::from_secs(60),
            message: String::new(),
            version: 0,
        }
    }
}

/// An operator's change: every field optional, merged over what is stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoomEdit {
    /// Turns the room on or off.
    pub enabled: Option<bool>,
    /// A new order, for joiners not yet placed.
    pub order: Option<RoomOrder>,
    /// `Some(None)`: no pre-queue.
    pub prequeue_starts_at: Option<Option<DateTime<Utc>>>,
    /// Passes admitted per second (1 to 100 000).
    pub admit_per_second: Option<i64>,
    /// Most live passes at once (1 to 10^6).
    pub max_active: Option<i64>,
    /// How long a pass lasts, in seconds (10 to 3600).
    pub pass_ttl_secs: Option<i64>,
    /// A shopper not heard of for this long (seconds, 10 to 3600) loses the place.
    pub abandon_after_secs: Option<i64>,
    /// A new message to everyone waiting ("" removes it).
    pub message: Option<String>,
}

/// Why an edit was refused; [`InvalidRoom::field`] names the field in the client's
/// spelling.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidRoom {
    /// Outside 1 to 100 000.
    #[error("admitPerSecond must be between 1 and 100000")]
    AdmitPerSecond,
    /// Outside 1 to 10^6.
    #[error("maxActive must be between 1 and 1000000")]
    MaxActive,
    /// Outside 10 to 3600 s.
    #[error("passTtlSecs must be between 10 and 3600")]
    PassTtl,
    /// Outside 10 to 3600 s.
    #[error("abandonAfterSecs must be between 10 and 3600")]
    AbandonAfter,
    #[error(
        "prequeueStartsAt must be before the sale's start, {}",
        crate::domain::STORABLE_RANGE
    )]
    /// Not before the sale's start, or not storable.
    Prequeue,
    /// Longer than [`MESSAGE_MAX_CHARS`], or holding a control character.
    #[error("message must be at most 200 characters, without control characters")]
    Message,
    /// No `RoomOrder` word.
    #[error("order must be fifo or random")]
    Order,
}

impl InvalidRoom {
    /// The field at fault, in the API's spelling (`admitPerSecond`, …).
    pub fn field(&self) -> &'static str {
        match self {
            Self::AdmitPerSecond => "admitPerSecond",
            Self::MaxActive => "maxActive",
            Self::PassTtl => "passTtlSecs",
            Self::AbandonAfter => "abandonAfterSecs",
            Self::Prequeue => "prequeueStartsAt",
            Self::Message => "message",
            Self::Order => "order",
        }
    }
}

impl RoomConfig {
    /// This room with `edit` merged in, checked against the item's sale start.
    pub fn edited(
        &self,
        edit: &RoomEdit,
        sale_starts_at: DateTime<Utc>,
    ) -> Result<Self, InvalidRoom> {
        let within =
            |value: Option<i64>, current: u64, range: std::ops::RangeInclusive<i64>, error| {
                match value {
                    None => Ok(current),
                    Some(v) if range.contains(&v) => Ok(v as u64),
                    Some(_) => Err(error),
                }
            };
        let prequeue = edit.prequeue_starts_at.unwrap_or(self.prequeue_starts_at);
        if prequeue.is_some_and(|at| !crate::domain::is_storable(at) || at >= sale_starts_at) {
            return Err(InvalidRoom::Prequeue);
        }
        let message = match &edit.message {
            None => self.message.clone(),
            Some(text) => {
                let text = text.trim();
                if text.chars().count() > MESSAGE_MAX_CHARS || text.chars().any(char::is_control) {
                    return Err(InvalidRoom::Message);
                }
                text.to_owned()
            }
        };
        Ok(Self {
            enabled: edit.enabled.unwrap_or(self.enabled),
            order: edit.order.unwrap_or(self.order),
            prequeue_starts_at: prequeue,
            admit_per_second: within(
                edit.admit_per_second,
                self.admit_per_second.into(),
                1..=100_000,
                InvalidRoom::AdmitPerSecond,
            )? as u32,
            max_active: within(
                edit.max_active,
                self.max_active.into(),
                1..=1_000_000,
                InvalidRoom::MaxActive,
            )? as u32,
            pass_ttl: Duration::from_secs(within(
                edit.pass_ttl_secs,
                self.pass_ttl.as_secs(),
                10..=3_600,
                InvalidRoom::PassTtl,
            )?),
            abandon_after: Duration::from_secs(within(
                edit.abandon_after_secs,
                self.abandon_after.as_secs(),
                10..=3_600,
                InvalidRoom::AbandonAfter,
            )?),
            message,
            version: self.version,
        })
    }

    /// The settings as the API spells them (the version aside).
    pub fn settings(&self) -> RoomSettings {
        RoomSettings {
            enabled: self.enabled,
            order: self.order.label(),
            prequeue_starts_at: self.prequeue_starts_at,
            admit_per_second: self.admit_per_second,
            max_active: self.max_active,
            pass_ttl_secs: self.pass_ttl.as_secs(),
            abandon_after_secs: self.abandon_after.as_secs(),
            message: self.message.clone(),
        }
    }

    /// When joining opens for a sale starting at `sale_starts_at`.
    pub fn opens_at(&self, sale_starts_at: DateTime<Utc>) -> DateTime<Utc> {
        self.prequeue_starts_at.unwrap_or(sale_starts_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_is_merged_and_each_bound_names_its_field() {
        let start = Utc::now();
        let room = RoomConfig::default();
        let on = room
            .edited(
                &RoomEdit {
                    enabled: Some(true),
                    admit_per_second: Some(10),
                    ..Default::default()
                },
                start,
            )
            .unwrap();
        assert!(on.enabled);
        assert_eq!((on.admit_per_second, on.max_active), (10, 500));
        let refused = |edit: RoomEdit| room.edited(&edit, start).unwrap_err().field();
        assert_eq!(
            refused(RoomEdit {
                admit_per_second: Some(0),
                ..Default::default()
            }),
            "admitPerSecond"
        );
        assert_eq!(
            refused(RoomEdit {
                max_active: Some(-1),
                ..Default::default()
            }),
            "maxActive"
        );
        assert_eq!(
            refused(RoomEdit {
                pass_ttl_secs: Some(5),
                ..Default::default()
            }),
            "passTtlSecs"
        );
        assert_eq!(
            refused(RoomEdit {
                abandon_after_secs: Some(4000),
                ..Default::default()
            }),
            "abandonAfterSecs"
        );
        let late = Some(Some(start + chrono::Duration::seconds(1)));
        assert_eq!(
            refused(RoomEdit {
                message: Some("x".repeat(MESSAGE_MAX_CHARS + 1)),
                ..Default::default()
            }),
            "message"
        );
        assert_eq!(
            refused(RoomEdit {
                message: Some("line\nbreak".into()),
                ..Default::default()
            }),
            "message"
        );
        let said = room
            .edited(
                &RoomEdit {
                    message: Some(format!(" {} ", "é".repeat(MESSAGE_MAX_CHARS))),
                    ..Default::default()
                },
                start,
            )
            .unwrap();
        assert_eq!(said.message.chars().count(), MESSAGE_MAX_CHARS);
        assert_eq!(
            refused(RoomEdit {
                prequeue_starts_at: late,
                ..Default::default()
            }),
            "prequeueStartsAt"
        );
    }
}
