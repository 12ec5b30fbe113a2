//! The Redis key scheme of one item's sale state, the one place it is spelled (the tests
//! use it too). Every key carries the hash tag `{item:<id>}`, so the scripts and the
//! MULTI/EXEC pipeline touch one Redis Cluster slot. A `per_item` limiter policy counts
//! the item's purchases under the same tag ([`limiter_partition`]), so its keys share
//! that slot too: one script could decide the limit and reserve the stock.

use crate::domain::UserId;
use crate::limiter::Partition;
use crate::sale::item::ItemId;

/// How long an item's keys outlive the last order deadline its sale can have: time for
/// the sweeper and the reconciler to finish what a crash or an outage left, after which
/// Postgres alone keeps the record (see `SaleRedis::keys_expire_at`).
pub const KEY_GRACE: chrono::Duration = chrono::Duration::hours(1);

/// The hash tag of an item's keys, without its braces.
fn item_tag(item: ItemId) -> String {
    format!("item:{item}")
}

/// The partition a `per_item` limiter policy counts `item`'s purchases under: the item's
/// own tag. Always a valid partition (`item:` and digits); `None` could only mean this
/// spelling changed, and then a `per_item` check answers misconfigured, never guesses.
pub fn limiter_partition(item: ItemId) -> Option<Partition> {
    Partition::new(item_tag(item))
}

/// The keys of one item: `<prefix>:{item:<id>}:<what>`.
pub struct ItemKeys {
    base: String,
}

impl ItemKeys {
    pub fn new(prefix: &str, item: ItemId) -> Self {
        Self {
            base: format!("{prefix}:{{{}}}", item_tag(item)),
        }
    }
    pub fn stock(&self) -> String {
        format!("{}:stock", self.base)
    }
    pub fn buyers(&self) -> String {
        format!("{}:buyers", self.base)
    }
    pub fn success(&self) -> String {
        format!("{}:success", self.base)
    }
    pub fn marker(&self, user: UserId) -> String {
        format!("{}:bought:{user}", self.base)
    }
    pub fn orders(&self) -> String {
        format!("{}:orders", self.base)
    }
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
    /// Order id → Postgres transaction id of each pending reservation whose COMMIT went
    /// unanswered, so the reconciler can ask Postgres what became of it.
    pub fn in_doubt(&self) -> String {
        format!("{}:in-doubt", self.base)
    }
    /// Every key of the item but the per-user markers (which expire on their own): what
    /// the item's expiry is stamped on.
    pub fn item_wide(&self) -> [String; 9] {
        [
            self.stock(),
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
