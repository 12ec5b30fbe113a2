//! The in-process cache of items.
//!
//! The purchase path answers "unknown item", "not started" and "ended" from here, with
//! no Redis call and no quota spent. The cache holds every item (ended ones too, so an
//! ended sale answers `SALE_ENDED`, not `ITEM_NOT_FOUND`); it is reloaded when this
//! instance creates an item and every second, which is how other instances' items
//! arrive.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use sqlx::PgPool;

use super::item::{Item, ItemId};

#[derive(Default)]
pub struct Catalog {
    items: ArcSwap<HashMap<ItemId, Arc<Item>>>,
}

impl Catalog {
    pub fn get(&self, id: ItemId) -> Option<Arc<Item>> {
        self.items.load().get(&id).cloned()
    }

    /// Items whose sale has not ended, soonest first.
    pub fn unended(&self, now: chrono::DateTime<chrono::Utc>) -> Vec<Arc<Item>> {
        let mut items: Vec<_> = self
            .items
            .load()
            .values()
            .filter(|i| i.ends_at > now)
            .cloned()
            .collect();
        items.sort_by_key(|i| (i.starts_at, i.id));
        items
    }

    /// Items whose sale has ended (their metric series are removed).
    pub fn ended_ids(&self, now: chrono::DateTime<chrono::Utc>) -> Vec<ItemId> {
        self.items
            .load()
            .values()
            .filter(|i| i.ends_at <= now)
            .map(|i| i.id)
            .collect()
    }

    pub async fn reload(&self, pool: &PgPool) -> anyhow::Result<()> {
        let items = super::postgres::all_items(pool).await?;
        self.items.store(Arc::new(
            items.into_iter().map(|i| (i.id, Arc::new(i))).collect(),
        ));
        Ok(())
    }
}
