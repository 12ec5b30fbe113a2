//! The in-process cache of items.
//!
//! The purchase path answers "unknown item", "not started" and "ended" from here, with
//! no Redis call and no quota spent. The cache holds every item (ended ones too, so an
//! ended sale answers `SALE_ENDED`, not `ITEM_NOT_FOUND`); it is reloaded when this
//! instance creates an item and every second, which is how other instances' items
//! arrive.
//!
//! Reloads can overlap (the periodic one and an item creation's), and a reload whose
//! query started first can finish last: its older snapshot, without the item just
//! created, must not replace the newer one (a sale answered `ITEM_NOT_FOUND` for up to
//! a second after its item was created). Each reload takes a ticket before its query,
//! and a snapshot is installed only over one with an older ticket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use sqlx::PgPool;

use super::item::{Item, ItemId};

/// Every item as the last reload read it (see the module docs); one per process, swapped
/// whole.
#[derive(Default)]
pub struct Catalog {
    items: ArcSwap<Snapshot>,
    /// The last ticket handed to a reload.
    tickets: AtomicU64,
}

/// The items as one reload read them, and that reload's ticket.
#[derive(Default)]
struct Snapshot {
    ticket: u64,
    items: HashMap<ItemId, Arc<Item>>,
}

impl Catalog {
    /// The item, if the last reload saw it.
    pub fn get(&self, id: ItemId) -> Option<Arc<Item>> {
        self.items.load().items.get(&id).cloned()
    }

    /// Every item, ended ones too.
    pub fn all(&self) -> Vec<Arc<Item>> {
        self.items.load().items.values().cloned().collect()
    }

    /// Items whose sale has not ended, soonest first.
    pub fn unended(&self, now: chrono::DateTime<chrono::Utc>) -> Vec<Arc<Item>> {
        let mut items: Vec<_> = self
            .items
            .load()
            .items
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
            .items
            .values()
            .filter(|i| i.ends_at <= now)
            .map(|i| i.id)
            .collect()
    }

    /// Reads every item; of two overlapping reloads, the one that started last wins.
    pub async fn reload(&self, pool: &PgPool) -> anyhow::Result<()> {
        let ticket = self.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        let items = super::records::all_items(pool).await?;
        self.install(ticket, items);
        Ok(())
    }

    /// Installs what the reload holding `ticket` read, unless a later reload's snapshot
    /// is already in place.
    fn install(&self, ticket: u64, items: Vec<Item>) {
        let snapshot = Arc::new(Snapshot {
            ticket,
            items: items.into_iter().map(|i| (i.id, Arc::new(i))).collect(),
        });
        self.items.rcu(|current| {
            if current.ticket < ticket {
                Arc::clone(&snapshot)
            } else {
                Arc::clone(current)
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn item(id: i64) -> Item {
        Item {
            id: ItemId::try_from(id).expect("a valid id"),
            name: "x".into(),
            price_cents: 1,
            total_stock: 1,
            remaining_stock: 1,
            starts_at: Utc::now(),
            ends_at: Utc::now() + chrono::Duration::hours(1),
            paused: false,
            archived_at: None,
        }
    }

    #[test]
    fn a_reload_that_started_earlier_never_replaces_a_later_ones_snapshot() {
        let catalog = Catalog::default();
        let earlier = catalog.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        let later = catalog.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        // The later reload saw the new item and finished first.
        catalog.install(later, vec![item(1), item(2)]);
        catalog.install(earlier, vec![item(1)]);
        let two = ItemId::try_from(2).expect("a valid id");
        assert!(catalog.get(two).is_some(), "the newer snapshot stays");
        // A reload that starts afterwards replaces it as usual.
        let next = catalog.tickets.fetch_add(1, Ordering::SeqCst) + 1;
        catalog.install(next, vec![item(1)]);
        assert!(catalog.get(two).is_none());
    }
}
