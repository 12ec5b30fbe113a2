//! The id of an item on sale.

use std::fmt;

use serde::Serialize;

/// An item's id: a positive integer (Postgres `BIGSERIAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ItemId(i64);

/// A number that cannot be an item's id.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("an item id is a positive integer")]
pub struct InvalidItemId;

impl ItemId {
    /// The id as stored.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl TryFrom<i64> for ItemId {
    type Error = InvalidItemId;

    fn try_from(value: i64) -> Result<Self, InvalidItemId> {
        if value > 0 {
            Ok(Self(value))
        } else {
            Err(InvalidItemId)
        }
    }
}

impl fmt::Display for ItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
