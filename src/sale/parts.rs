//! What every part of the sale works on: the stores and the in-process state they
//! share, built once at start-up and handed to each part ([`super::Items`],
//! [`super::Purchases`], [`super::Orders`], the [`super::Sweeper`], the
//! [`super::Reconciler`], …), which keeps only the pieces it uses.

use std::sync::Arc;

use sqlx::PgPool;

use super::catalog::Catalog;
use super::item::Item;
use super::records;
use super::sold_out::SoldOut;
use super::stock::{KeyLifetime, Rebuilds, StockRedis};
use crate::metrics::Metrics;

/// The stores and the in-process state every part of the sale shares (see the module docs);
/// cloned into each part, which keeps what it uses.
#[derive(Clone)]
pub struct SaleParts {
    /// Reads, admin work and the background tasks (order commits have a pool of their
    /// own, see `Purchases`).
    pub pool: PgPool,
    /// The sale's Redis side: the keys and the one way to call.
    pub redis: StockRedis,
    /// When an item's keys expire.
    pub lifetime: KeyLifetime,
    /// This instance's copy of the items.
    pub catalog: Arc<Catalog>,
    /// This instance's sold-out items, and their channel.
    pub sold_out: Arc<SoldOut>,
    /// The Prometheus families.
    pub metrics: Arc<Metrics>,
    /// Whether a shopper whose order was cancelled or expired may buy the item again
    /// (then Redis forgets them as a buyer).
    pub rebuy: bool,
}

impl SaleParts {
    /// Rebuilds `item`'s Redis state from Postgres where it is missing (Redis lost its
    /// data, or the keys expired): see `lua/rebuild_item.lua`, which counts the released
    /// units Redis has not had back yet, and buyers = users holding an order.
    pub async fn rebuild(&self, item: &Item) -> anyhow::Result<()> {
        let ledger = records::item_ledger(&self.pool, item.id, self.rebuy).await?;
        let rebuilds = Rebuilds::new(self.redis.clone(), self.lifetime);
        if rebuilds.rebuild(item, &ledger).await? {
            tracing::info!(
                item.id = %item.id, remaining = ledger.remaining, owed = ledger.owed.len(),
                buyers = ledger.buyers.len(), "item state loaded into redis"
            );
        }
        Ok(())
    }
}
