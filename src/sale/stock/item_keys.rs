//! The Redis key scheme of one item's sale state, the one place it is spelled (the tests
//! use it too). Every key carries the hash tag `{item:<id>}`, so the scripts and the
//! MULTI/EXEC pipeline touch one Redis Cluster slot. A `per_item` limiter policy counts
//! the item's purchases under the same tag ([`limiter_partition`]), so its keys share
//! that slot too: one script could decide the limit and reserve the stock.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::domain::UserId;
use crate::limiter::Partition;
use crate::sale::item::{Item, ItemId};

/// How long an item's keys outlive the last order deadline its sale can have: time for
/// the sweeper and the reconciler to finish what a crash or an outage left, after which
/// Postgres alone keeps the record (see [`KeyLifetime`]).
pub const KEY_GRACE: chrono::Duration = chrono::Duration::hours(1);

/// When an item's keys expire: its sale's end plus the payment deadline plus
/// [`KEY_GRACE`]. Every order's deadline has passed by then, and the sweeper has had an
/// hour to give back what they released; a give-back that comes later finds the keys
/// gone and is recorded in Postgres alone.
#[derive(Debug, Clone, Copy)]
pub struct KeyLifetime {
    keys_outlive_sale: chrono::Duration,
}

impl KeyLifetime {
    /// `pay_within` is the payment deadline: released units can come back until the
    /// last order placed before the end has passed it.
    pub fn new(pay_within: Duration) -> Self {
        let keys_outlive_sale = chrono::Duration::from_std(pay_within)
            .unwrap_or(chrono::Duration::MAX)
            .checked_add(&KEY_GRACE)
            .unwrap_or(chrono::Duration::MAX);
        Self { keys_outlive_sale }
    }

    /// When `item`'s keys expire (see [`KeyLifetime`]).
    pub fn expire_at(&self, item: &Item) -> DateTime<Utc> {
        item.ends_at
            .checked_add_signed(self.keys_outlive_sale)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// [`Self::expire_at`] in ms since the epoch, as the scripts take it.
    pub fn expire_at_ms(&self, item: &Item) -> i64 {
        self.expire_at(item).timestamp_millis()
    }
}

/// The hash tag of an item's keys, without its braces.
fn item_tag(item: ItemId) -> String {
    format!("item:{item}")
}

/// The partition a `per_item` limiter policy counts `item`'s purchases under: the item's
/// own tag. Always a valid partition (`item:` and digits); `None` could only mean this
/// spelling changed, and then a `per_item` check answers misconfigured, never guesses.
pub fn limiter_partition(item: ItemId) -> Option<Partition> {
    Partition::new(item_tag(item)).map(|partition| partition.for_item(item.get()))
}

/// The keys of one item: `<prefix>:{item:<id>}:<what>`.
pub struct ItemKeys {
    base: String,
}

impl ItemKeys {
    /// The keys of `item` under `prefix`.
    pub fn new(prefix: &str, item: ItemId) -> Self {
        Self {
            base: format!("{prefix}:{{{}}}", item_tag(item)),
        }
    }
    /// The stock counter: units Redis may still reserve.
    pub fn stock(&self) -> String {
        format!("{}:stock", self.base)
    }
    /// The set of the item's buyers: a user in it cannot reserve again.
    pub fn buyers(&self) -> String {
        format!("{}:buyers", self.base)
    }
    /// Successful purchases, counted by the success pipeline.
    pub fn success(&self) -> String {
        format!("{}:success", self.base)
    }
    /// The per-user success marker: the order id, kept 300 s.
    pub fn marker(&self, user: UserId) -> String {
        format!("{}:bought:{user}", self.base)
    }
    /// Buyer → order id of each committed purchase.
    pub fn orders(&self) -> String {
        format!("{}:orders", self.base)
    }
    /// The pending reservations, scored by their deadline: what the reconciler settles.
    pub fn pending(&self) -> String {
        format!("{}:pending", self.base)
    }
    /// Orders whose unit was given back (`lua/give_back.lua`): at most once each.
    pub fn returned(&self) -> String {
        format!("{}:returned", self.base)
    }
    /// Orders given back whose `returned_at` Postgres may not have yet: the reconciler
    /// must not count them as holding a unit.
    pub fn returning(&self) -> String {
        format!("{}:returning", self.base)
    }
    /// Bumped by every write to the stock counter (see `StockSnapshot`).
    pub fn version(&self) -> String {
        format!("{}:stock-version", self.base)
    }
    /// Order id → batch key (`records::BatchKey`) of each pending reservation whose
    /// commit went unanswered and was not settled, so the reconciler can settle it.
    pub fn in_doubt(&self) -> String {
        format!("{}:in-doubt", self.base)
    }
    /// Held while an operator's stock edit runs (`stock::StockEdits`): the reconciler's
    /// drift repair stays off the counter meanwhile.
    pub fn stock_edit(&self) -> String {
        format!("{}:stock-edit", self.base)
    }
    /// The waiting room's counters (hash: joined, pre, sealed0, mapped, serving,
    /// admitted, skipped, credit, credit_at, may_return, may_return_until, closed_at; see
    /// `sale::room`).
    pub fn room(&self) -> String {
        format!("{}:room", self.base)
    }
    /// User id → join index: one place per user.
    pub fn room_members(&self) -> String {
        format!("{}:room-members", self.base)
    }
    /// The sealed shuffles, in order: `"<first>:<size>:<seed>"`.
    pub fn room_rounds(&self) -> String {
        format!("{}:room-rounds", self.base)
    }
    /// The inlet's steps, in order: `"<from>:<to>:<at ms>:<skipped places, comma-separated>"`.
    pub fn room_steps(&self) -> String {
        format!("{}:room-steps", self.base)
    }
    /// Join index → when its shopper was last heard of (ms).
    pub fn room_alive(&self) -> String {
        format!("{}:room-alive", self.base)
    }
    /// Admitted places whose pass is neither used nor expired → the pass's expiry (ms).
    pub fn room_live(&self) -> String {
        format!("{}:room-live", self.base)
    }
    /// Whether the item sells through its waiting room (hash: version, on; see
    /// `lua/room_gate.lua`): what the reservation script decides with. An item key,
    /// not a room key: it exists for every item on sale (off for most), so a missing
    /// gate means Redis lost it.
    pub fn room_gate(&self) -> String {
        format!("{}:room-gate", self.base)
    }
    /// The waiting room's keys (the scripts stamp their expiry as they write them).
    pub fn room_wide(&self) -> [String; 6] {
        [
            self.room(),
            self.room_members(),
            self.room_rounds(),
            self.room_steps(),
            self.room_alive(),
            self.room_live(),
        ]
    }
    /// Every key of the item but the per-user markers (which expire on their own): what
    /// the item's expiry is stamped on.
    pub fn item_wide(&self) -> [String; 10] {
        [
            self.stock(),
            self.room_gate(),
            self.version(),
            self.buyers(),
            self.success(),
            self.orders(),
            self.pending(),
            self.returned(),
            self.returning(),
            self.in_doubt(),
        ]
    }
}
