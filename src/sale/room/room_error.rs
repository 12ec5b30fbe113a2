//! Every refusal of the waiting room, spelled once: code (and so status) and message, like
//! [`crate::sale::SaleError`] for purchases.

use chrono::{DateTime, Utc};

use super::room_config::InvalidRoom;
use crate::sale::SaleError;
use crate::vocabulary::ErrorCode;

/// Why a join, poll or room setting was refused; each is one API error, its code and status
/// below.
#[derive(Debug, thiserror::Error)]
pub enum RoomError {
    /// The sale's own answer (`ITEM_NOT_FOUND`, `SOLD_OUT`; a purchase without a pass is
    /// the sale's `NOT_ADMITTED`, decided by the reservation script).
    #[error(transparent)]
    Sale(#[from] SaleError),
    /// Joining opens at this instant (the pre-queue's start, or the sale's).
    #[error("the queue opens at {0}")]
    NotOpen(DateTime<Utc>),
    /// The item has no waiting room on.
    #[error("this item has no waiting room open")]
    Closed,
    /// The room is closed for good: the item sold out and no unit can come back (an
    /// operator's stock raise reopens it).
    #[error("the queue has ended: the item sold out and no unit can come back")]
    RoomClosed,
    /// Missing, forged, someone else's or another item's ticket.
    #[error("this queue ticket is not valid for you and this item: join the queue")]
    InvalidTicket,
    /// An operator's room settings were refused.
    #[error(transparent)]
    InvalidSettings(#[from] InvalidRoom),
    /// This ticket polled faster than its bucket refills ([`super::PollBudget`]).
    #[error(
        "polling too fast: poll again in {retry_after_ms} ms, then every refreshIntervalSeconds"
    )]
    PollingTooFast {
        /// When the bucket holds a poll again, in milliseconds.
        retry_after_ms: u64,
    },
    /// The waiting room's Redis did not answer: the sale's fail mode (closed).
    #[error("the waiting room is unavailable, please retry shortly")]
    Unavailable(anyhow::Error),
}

impl RoomError {
    /// The error's stable `code` in the JSON body, which also picks its status
    /// ([`ErrorCode::status`]).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Sale(error) => error.code(),
            Self::NotOpen(_) => ErrorCode::QueueNotOpen,
            Self::Closed => ErrorCode::QueueClosed,
            Self::RoomClosed => ErrorCode::RoomClosed,
            Self::InvalidTicket => ErrorCode::InvalidTicket,
            Self::InvalidSettings(_) => ErrorCode::ValidationFailed,
            Self::PollingTooFast { .. } => ErrorCode::PollingTooFast,
            Self::Unavailable(_) => ErrorCode::QueueUnavailable,
        }
    }
}
