//! Items on sale: the parsed domain types.

use chrono::{DateTime, Utc};

pub use crate::domain::{InvalidItemId, ItemId};

/// An item as stored. `remaining_stock` is Postgres's count, the final truth; the live
/// count during a sale is Redis's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Postgres's id, given at creation; the API's `{id}`.
    pub id: ItemId,
    /// What shoppers see (1-200 printable characters).
    pub name: String,
    /// Price in cents (0 to 10^11).
    pub price_cents: i64,
    /// Units put on sale, as the operator last set them.
    pub total_stock: i32,
    /// Units not yet sold (Postgres's count; see the type's docs).
    pub remaining_stock: i32,
    /// When purchases open.
    pub starts_at: DateTime<Utc>,
    /// When purchases close (after `starts_at`).
    pub ends_at: DateTime<Utc>,
    /// Paused by an operator: purchases answer 409 `SALE_PAUSED` until resumed.
    pub paused: bool,
    /// Archived by an operator: its sale is over, and it is gone from the shop and the
    /// dashboard's default lists (its orders stay).
    pub archived_at: Option<DateTime<Utc>>,
}

/// Where an item's sale stands at a given instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SalePhase {
    /// Before `starts_at`: purchases answer 409 `SALE_NOT_STARTED`.
    NotStarted,
    /// Between the two: purchases go ahead.
    Open,
    /// From `ends_at` on: purchases answer 409 `SALE_ENDED`.
    Ended,
}

impl Item {
    /// Where the sale stands at `now`: the start is included, the end excluded.
    pub fn phase(&self, now: DateTime<Utc>) -> SalePhase {
        if now < self.starts_at {
            SalePhase::NotStarted
        } else if now >= self.ends_at {
            SalePhase::Ended
        } else {
            SalePhase::Open
        }
    }
}

/// A checked request to create an item.
#[derive(Debug, Clone)]
pub struct NewItem {
    /// What shoppers see.
    pub name: String,
    /// Price in cents.
    pub price_cents: i64,
    /// Units put on sale (1 to 10^7).
    pub stock: i32,
    /// When purchases open.
    pub starts_at: DateTime<Utc>,
    /// When purchases close (after the start).
    pub ends_at: DateTime<Utc>,
}

/// Largest stock one item may have: far above any flash sale, far below `i32::MAX`.
pub const MAX_STOCK: i32 = 10_000_000;

/// Largest price one item may have, in cents (a billion in the currency): an item's paid
/// orders, at most its stock, then sum to at most `MAX_PRICE_CENTS × MAX_STOCK` =
/// 10¹⁸, which fits in an `i64` (the list's revenue is summed as a `BIGINT`).
pub const MAX_PRICE_CENTS: i64 = 100_000_000_000;
const _: () = assert!(MAX_PRICE_CENTS.checked_mul(MAX_STOCK as i64).is_some());

/// Why an item's creation or edit was refused: 400 `VALIDATION_FAILED` naming the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidItem {
    /// Empty, too long, or with a control character.
    #[error("name must be 1 to 200 characters, none of them a control character")]
    Name,
    /// Outside 0 to 10^11 cents.
    #[error("priceCents must be between 0 and 100000000000")]
    Price,
    /// Outside 1 to 10^7 units.
    #[error("stock must be between 1 and 10000000")]
    Stock,
    /// The end is not after the start.
    #[error("endsAt must be after the sale's start (startsAt)")]
    Window,
    /// The start cannot be stored.
    #[error("startsAt must be {}", crate::domain::STORABLE_RANGE)]
    StartOutOfRange,
    /// The end cannot be stored.
    #[error("endsAt must be {}", crate::domain::STORABLE_RANGE)]
    EndOutOfRange,
}

impl InvalidItem {
    /// The request field at fault, in the client's spelling.
    pub fn field(&self) -> &'static str {
        match self {
            Self::Name => "name",
            Self::Price => "priceCents",
            Self::Stock => "stock",
            Self::Window | Self::EndOutOfRange => "endsAt",
            Self::StartOutOfRange => "startsAt",
        }
    }
}

/// A checked edit of an item: each field optional (`PATCH /admin/api/items/{id}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ItemEdit {
    /// A new name, checked as a creation's.
    pub name: Option<String>,
    /// A new price, in cents.
    pub price_cents: Option<i64>,
    /// A new end, after the item's start.
    pub ends_at: Option<DateTime<Utc>>,
    /// The new total stock: raised, or lowered to no less than what is sold or held.
    pub stock: Option<i32>,
}

impl ItemEdit {
    /// Checks each field present as a creation would; the end against `starts_at`.
    pub fn parse(
        name: Option<&str>,
        price_cents: Option<i64>,
        ends_at: Option<DateTime<Utc>>,
        stock: Option<i64>,
        starts_at: DateTime<Utc>,
    ) -> Result<Self, InvalidItem> {
        Ok(Self {
            name: name.map(checked_name).transpose()?,
            price_cents: price_cents.map(checked_price).transpose()?,
            ends_at: ends_at.map(|at| checked_end(starts_at, at)).transpose()?,
            stock: stock.map(checked_stock).transpose()?,
        })
    }

    /// Whether the edit changes nothing (answered without a write).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

fn checked_name(name: &str) -> Result<String, InvalidItem> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 200 || !crate::domain::is_printable(name) {
        return Err(InvalidItem::Name);
    }
    Ok(name.to_string())
}

fn checked_price(price_cents: i64) -> Result<i64, InvalidItem> {
    if !(0..=MAX_PRICE_CENTS).contains(&price_cents) {
        return Err(InvalidItem::Price);
    }
    Ok(price_cents)
}

fn checked_stock(stock: i64) -> Result<i32, InvalidItem> {
    i32::try_from(stock)
        .ok()
        .filter(|s| (1..=MAX_STOCK).contains(s))
        .ok_or(InvalidItem::Stock)
}

fn checked_end(
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
) -> Result<DateTime<Utc>, InvalidItem> {
    if !crate::domain::is_storable(ends_at) {
        return Err(InvalidItem::EndOutOfRange);
    }
    if ends_at <= starts_at {
        return Err(InvalidItem::Window);
    }
    Ok(ends_at)
}

impl NewItem {
    /// Checks a creation's fields; the first refused one names itself.
    pub fn parse(
        name: &str,
        price_cents: i64,
        stock: i64,
        starts_at: DateTime<Utc>,
        ends_at: DateTime<Utc>,
    ) -> Result<Self, InvalidItem> {
        let name = checked_name(name)?;
        let price_cents = checked_price(price_cents)?;
        let stock = checked_stock(stock)?;
        if !crate::domain::is_storable(starts_at) {
            return Err(InvalidItem::StartOutOfRange);
        }
        let ends_at = checked_end(starts_at, ends_at)?;
        Ok(Self {
            name,
            price_cents,
            stock,
            starts_at,
            ends_at,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn a_price_is_at_most_the_maximum_on_creation_and_on_edit() {
        let now = Utc::now();
        let later = now + Duration::hours(1);
        assert!(NewItem::parse("P", MAX_PRICE_CENTS, MAX_STOCK.into(), now, later).is_ok());
        for price in [MAX_PRICE_CENTS + 1, i64::MAX] {
            assert_eq!(
                NewItem::parse("P", price, 5, now, later).unwrap_err(),
                InvalidItem::Price
            );
            assert_eq!(
                ItemEdit::parse(None, Some(price), None, None, now).unwrap_err(),
                InvalidItem::Price
            );
        }
    }

    #[test]
    fn items_need_a_name_stock_and_an_end_after_the_start() {
        let now = Utc::now();
        let later = now + Duration::hours(1);
        assert!(NewItem::parse("Phone", 100, 5, now, later).is_ok());
        assert_eq!(
            NewItem::parse(" ", 100, 5, now, later).unwrap_err(),
            InvalidItem::Name
        );
        assert_eq!(
            NewItem::parse("P", -1, 5, now, later).unwrap_err(),
            InvalidItem::Price
        );
        assert_eq!(
            NewItem::parse("P", 1, 0, now, later).unwrap_err(),
            InvalidItem::Stock
        );
        assert_eq!(
            NewItem::parse("P", 1, i64::MAX, now, later).unwrap_err(),
            InvalidItem::Stock
        );
        assert_eq!(
            NewItem::parse("P", 1, 5, later, now).unwrap_err(),
            InvalidItem::Window
        );
        assert_eq!(
            NewItem::parse("P", 1, 5, now, now).unwrap_err(),
            InvalidItem::Window
        );
        assert_eq!(
            NewItem::parse("P\u{0}", 1, 5, now, later).unwrap_err(),
            InvalidItem::Name
        );
        let ancient: DateTime<Utc> = "-5000-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(
            NewItem::parse("P", 1, 5, ancient, later).unwrap_err(),
            InvalidItem::StartOutOfRange
        );
    }

    #[test]
    fn the_phase_follows_the_window() {
        let start = Utc::now();
        let item = Item {
            id: ItemId::try_from(1).unwrap(),
            name: "x".into(),
            price_cents: 1,
            total_stock: 1,
            remaining_stock: 1,
            starts_at: start,
            ends_at: start + Duration::seconds(10),
            paused: false,
            archived_at: None,
        };
        assert_eq!(
            item.phase(start - Duration::milliseconds(1)),
            SalePhase::NotStarted
        );
        assert_eq!(item.phase(start), SalePhase::Open);
        assert_eq!(item.phase(start + Duration::seconds(10)), SalePhase::Ended);
    }
}
