//! The Redis key scheme of one item's sale state, the one place it is spelled (the tests
//! use it too). Every key carries the hash tag `{item:<id>}`, so the scripts and the
//! MULTI/EXEC pipeline touch one Redis Cluster slot.

use crate::domain::UserId;
use crate::sale::item::ItemId;

/// The keys of one item: `<prefix>:{item:<id>}:<what>`.
pub struct ItemKeys {
    base: String,
}

impl ItemKeys {
    pub fn new(prefix: &str, item: ItemId) -> Self {
        Self {
            base: format!("{prefix}:{{item:{item}}}"),
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
    /// Bumped by every write to the stock counter (see `StockSnapshot`).
    pub fn version(&self) -> String {
        format!("{}:stock-version", self.base)
    }
    /// Order id → Postgres transaction id of each pending reservation whose COMMIT went
    /// unanswered, so the reconciler can ask Postgres what became of it.
    pub fn in_doubt(&self) -> String {
        format!("{}:in-doubt", self.base)
    }
}
