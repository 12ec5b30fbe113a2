//! The items on sale as operators run them and shoppers see them: create, pause and
//! resume, the listing with live stock, and what keeps this instance's view current
//! (the catalog reload, the sold-out re-read, the warm-up at start-up).

use std::sync::Arc;

use chrono::Utc;

use super::catalog::Catalog;
use super::consistency;
use super::item::{Item, ItemId, NewItem};
use super::parts::SaleParts;
use super::records::{self, ItemLedger};
use super::stock::Rebuilds;

pub struct Items {
    parts: SaleParts,
}

impl Items {
    pub fn new(parts: &SaleParts) -> Self {
        Self {
            parts: parts.clone(),
        }
    }

    pub fn catalog(&self) -> &Catalog {
        &self.parts.catalog
    }

    pub async fn reload_catalog(&self) -> anyhow::Result<()> {
        self.parts.catalog.reload(&self.parts.pool).await
    }

    /// Loads the catalog and puts every unended item's stock into Redis where it is
    /// missing. Run at start-up; never overwrites a live counter.
    pub async fn warm_up(&self) -> anyhow::Result<()> {
        self.reload_catalog().await?;
        for item in self.parts.catalog.unended(Utc::now()) {
            self.parts.rebuild(&item).await?;
        }
        self.refresh_sold_out().await
    }

    pub async fn create(&self, new: NewItem) -> anyhow::Result<Item> {
        let item = records::insert_item(&self.parts.pool, &new).await?;
        let ledger = ItemLedger {
            remaining: item.remaining_stock,
            owed: Vec::new(),
            buyers: Vec::new(),
        };
        Rebuilds::new(self.parts.redis.clone(), self.parts.lifetime)
            .rebuild(&item, &ledger)
            .await?;
        self.reload_catalog().await?;
        tracing::info!(item.id = %item.id, stock = item.total_stock, "item created");
        Ok(item)
    }

    /// Pauses or resumes an item's sale; `None` when there is no such item. Other
    /// instances see it at their next catalog reload (within a second).
    pub async fn set_paused(&self, item: ItemId, paused: bool) -> anyhow::Result<Option<Item>> {
        let updated = records::set_paused(&self.parts.pool, item, paused).await?;
        self.reload_catalog().await?;
        Ok(updated)
    }

    /// One item's live stock from Redis.
    pub async fn live_stock(&self, item: ItemId) -> Option<i64> {
        self.parts
            .redis
            .remaining(&[item])
            .await
            .ok()?
            .into_iter()
            .next()
            .flatten()
    }

    /// Items on sale or coming up, with their live remaining stock (Redis; Postgres's
    /// count when Redis cannot answer).
    pub async fn listing(&self) -> Vec<(Arc<Item>, i64)> {
        let items = self.parts.catalog.unended(Utc::now());
        let ids: Vec<_> = items.iter().map(|i| i.id).collect();
        let live = self.parts.redis.remaining(&ids).await.unwrap_or_else(|e| {
            tracing::warn!(error = %format!("{e:#}"), "live stock unavailable, showing postgres counts");
            vec![None; ids.len()]
        });
        items
            .into_iter()
            .zip(live)
            .map(|(item, live)| {
                let remaining = live.unwrap_or(i64::from(item.remaining_stock));
                (item, remaining)
            })
            .collect()
    }

    /// The safety net under pub/sub: one MGET of every unended item's stock, which
    /// also feeds `seckill_stock_remaining`.
    pub async fn refresh_sold_out(&self) -> anyhow::Result<()> {
        let parts = &self.parts;
        let items = parts.catalog.unended(Utc::now());
        let ids: Vec<_> = items.iter().map(|i| i.id).collect();
        let stocks = parts.redis.remaining(&ids).await?;
        consistency::retain_item_series(&parts.catalog, &parts.metrics.stock_remaining, &ids);
        let levels = ids
            .iter()
            .zip(&stocks)
            .filter_map(|(id, s)| Some((id.get(), (*s)?)));
        parts.metrics.tally.set_stock(levels);
        for (id, stock) in ids.iter().zip(stocks) {
            if let Some(stock) = stock {
                parts.sold_out.note(*id, stock <= 0);
                parts
                    .metrics
                    .stock_remaining
                    .with_label_values(&[&id.to_string()])
                    .set(stock);
            }
        }
        Ok(())
    }
}
