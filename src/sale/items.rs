//! The items on sale as operators run them and shoppers see them: create, edit (stock
//! included), pause and resume, end, archive, each audited; the listings with live
//! stock; and what keeps this instance's view current (the catalog reload, the sold-out
//! re-read, the warm-up at start-up).

use std::sync::Arc;

use chrono::Utc;

use super::catalog::Catalog;
use super::consistency;
use super::item::{Item, ItemEdit, ItemId, NewItem};
use super::parts::SaleParts;
use super::records::{self, AuditEntry, ChangeRefused, ItemFigures};
use super::room::{rooms, RoomConfig, Rooms};
use super::stock::{Adjusted, StockEdits};

/// Why an operator's change to an item was not made.
#[derive(Debug, thiserror::Error)]
pub enum ItemChangeError {
    /// The item refused the change (missing, archived, ended by an operator, …).
    #[error(transparent)]
    Refused(#[from] ChangeRefused),
    /// Lowering the stock below what is sold or held.
    #[error("stock can be lowered to {min} at the least: the rest is sold or held by orders and reservations")]
    StockTooLow {
        /// The least the stock may be lowered to.
        min: i64,
    },
    /// Another stock edit of the item is running.
    #[error("another stock edit of this item is running; try again in a moment")]
    EditInProgress,
}

impl From<anyhow::Error> for ItemChangeError {
    fn from(e: anyhow::Error) -> Self {
        Self::Refused(ChangeRefused::Failed(e))
    }
}

/// The items as operators run them and shoppers see them (see the module docs); one per
/// process.
pub struct Items {
    parts: SaleParts,
    /// The waiting rooms' settings: a room made with its item is stored beside it.
    rooms: Arc<Rooms>,
}

impl Items {
    /// The items over the shared parts and the rooms' settings.
    pub fn new(parts: &SaleParts, rooms: Arc<Rooms>) -> Self {
        Self {
            parts: parts.clone(),
            rooms,
        }
    }

    /// This instance's copy of the items.
    pub fn catalog(&self) -> &Catalog {
        &self.parts.catalog
    }

    /// Reads every item from Postgres into the catalog (every second, and after this
    /// instance's own changes).
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

    /// Stores a new item, audited as `by`'s, with its waiting room when `room` is given
    /// (checked by the caller, `RoomConfig::edited`): the item, its `create` entry, the
    /// room and its `room` entry in one transaction. Then Redis, from what Postgres
    /// holds (`SaleParts::rebuild`): the room gate before the stock, so the item never
    /// sells bare while its room is on. Should the process stop between the two, nothing
    /// sells bare either: a purchase finding the keys missing rebuilds them from
    /// Postgres, as the warm-up and the reconciler do, gate first.
    pub async fn create(
        &self,
        new: NewItem,
        room: Option<&RoomConfig>,
        by: &str,
    ) -> anyhow::Result<(Item, Option<RoomConfig>)> {
        let mut tx = self.parts.pool.begin().await?;
        let item = records::insert_item(&mut tx, &new).await?;
        records::audit_creation(&mut tx, &item, by).await?;
        let room = match room {
            None => None,
            Some(room) => {
                let stored = rooms::store(&mut tx, item.id, &RoomConfig::default(), room, by)
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("a new item already had a waiting room"))?;
                Some(stored)
            }
        };
        tx.commit().await?;
        if let Some(room) = &room {
            self.rooms.adopt(item.id, room);
        }
        if super::failpoints::dies_after_create(&new.name) {
            anyhow::bail!("failpoint sale::after_create: stopped before Redis");
        }
        self.parts.rebuild(&item).await?;
        self.changed(item.id).await?;
        tracing::info!(item.id = %item.id, stock = item.total_stock, room = room.is_some(), "item created");
        Ok((item, room))
    }

    /// Tells every instance that an operator changed `item` or its waiting room: each
    /// reloads its copies at once (`SoldOut::announce_change`). Best effort; what holds
    /// from the change's COMMIT on is the commit's own check of the item's row.
    pub async fn announce_change(&self, item: ItemId) {
        self.parts.sold_out.announce_change(item).await;
    }

    /// Reloads this instance's catalog and tells the others to reload theirs.
    async fn changed(&self, item: ItemId) -> anyhow::Result<()> {
        let reloaded = self.reload_catalog().await;
        self.announce_change(item).await;
        reloaded
    }

    /// Pauses or resumes an item's sale: refused at the commit from then on, on every
    /// instance; each instance's copy hears of it at once (pub/sub), or at its next
    /// reload.
    pub async fn set_paused(
        &self,
        item: ItemId,
        paused: bool,
        by: &str,
    ) -> Result<Item, ItemChangeError> {
        let updated = records::pause_item(&self.parts.pool, item, paused, by).await?;
        self.changed(item).await?;
        Ok(updated)
    }

    /// Ends the item's sale now, for good (`SALE_ENDED` from then on: the commit refuses
    /// it on every instance, and each instance's copy hears of it at once); with
    /// `archive`, archives it too.
    pub async fn end(
        &self,
        item: ItemId,
        archive: bool,
        by: &str,
    ) -> Result<Item, ItemChangeError> {
        let ended = records::end_item(&self.parts.pool, item, archive, by).await?;
        self.changed(item).await?;
        tracing::info!(item.id = %item, archive, by, "item ended");
        Ok(ended)
    }

    /// Applies an operator's edit. A stock change moves the total and the units left
    /// together, in Postgres and in Redis, without ever letting Redis offer a unit
    /// Postgres does not have (see `stock::StockEdits`): lowered, Redis first (refused
    /// when fewer units are left than the cut); raised, Postgres first. A raise reopens
    /// the item's waiting room if it had closed (sold out for good), in Redis before the
    /// 200, with an entry `room` in the item's history.
    pub async fn edit(
        &self,
        id: ItemId,
        edit: &ItemEdit,
        by: &str,
    ) -> Result<Item, ItemChangeError> {
        let Some(stock) = edit.stock else {
            let edited = records::edit_item(&self.parts.pool, id, edit, None, None, by).await?;
            self.changed(id).await?;
            return Ok(edited);
        };
        let edits = StockEdits::new(self.parts.redis.clone());
        if !edits.begin(id).await? {
            return Err(ItemChangeError::EditInProgress);
        }
        let edited = self.edit_stock(&edits, id, edit, stock, by).await;
        edits.end(id).await;
        self.changed(id).await?;
        let edited = edited?;
        let left = self
            .live_stock(id)
            .await
            .unwrap_or(i64::from(edited.remaining_stock));
        self.parts.sold_out.announce(id, left <= 0).await;
        tracing::info!(item.id = %id, stock = edited.total_stock, by, "item stock changed");
        Ok(edited)
    }

    async fn edit_stock(
        &self,
        edits: &StockEdits,
        id: ItemId,
        edit: &ItemEdit,
        stock: i32,
        by: &str,
    ) -> Result<Item, ItemChangeError> {
        let pool = &self.parts.pool;
        let current = records::item_by_id(pool, id)
            .await?
            .ok_or(ChangeRefused::NotFound)?;
        let total = current.total_stock;
        let change = i64::from(stock) - i64::from(total);
        if change < 0 {
            match edits.adjust(id, change).await? {
                Adjusted::TooFew(left) => {
                    return Err(ItemChangeError::StockTooLow {
                        min: i64::from(total) - left,
                    })
                }
                Adjusted::Missing => {
                    // Nothing can be pending in Redis: Postgres's count decides.
                    let left = i64::from(current.remaining_stock);
                    if left < -change {
                        return Err(ItemChangeError::StockTooLow {
                            min: i64::from(total) - left,
                        });
                    }
                }
                Adjusted::Applied(_) => {}
            }
        }
        // The room a raise reopens, for the history in the edit's own transaction.
        let reopens = if change > 0 {
            edits
                .closed_at(id)
                .await?
                .and_then(chrono::DateTime::from_timestamp_millis)
        } else {
            None
        };
        let stored =
            records::edit_item(pool, id, edit, Some((total, change as i32)), reopens, by).await;
        match stored {
            Ok(item) => {
                if change > 0 {
                    self.raise(edits, id, change, reopens.is_some(), by).await;
                }
                Ok(item)
            }
            Err(refused) => {
                if change < 0 {
                    // The units Redis gave up come back.
                    edits.adjust(id, -change).await?;
                }
                Err(refused.into())
            }
        }
    }

    /// The Redis side of a raise, which reopens a closed room (`lua/adjust_stock.lua`);
    /// `audited`: the edit recorded the reopening already. A failure leaves Redis short
    /// of the new units until the reconciler's next round (it counts from Postgres), and
    /// the room closed until the inlet sees them (`lua/room_close.lua` reopens it).
    async fn raise(&self, edits: &StockEdits, id: ItemId, change: i64, audited: bool, by: &str) {
        let reopened = match edits.adjust_reopening(id, change).await {
            Ok((_, reopened)) => reopened,
            Err(e) => {
                tracing::warn!(item.id = %id, error = %format!("{e:#}"), "raised stock not in redis yet: left to the reconciler");
                return;
            }
        };
        let Some(closed_at) = reopened else { return };
        tracing::info!(item.id = %id, by, "a stock raise reopened a closed waiting room");
        let Some(closed_at) = chrono::DateTime::from_timestamp_millis(closed_at) else {
            return;
        };
        // The room closed after the edit read it: its reopening is recorded on its own.
        if !audited {
            if let Err(e) = records::audit_reopen(&self.parts.pool, id, closed_at, by).await {
                tracing::warn!(item.id = %id, error = %e, "could not record a room's reopening");
            }
        }
    }

    /// The item's audited changes, newest first.
    pub async fn audit(&self, id: ItemId) -> anyhow::Result<Vec<AuditEntry>> {
        records::item_audit(&self.parts.pool, id).await
    }

    /// Every item (archived ones with `archived`; only `only` when given) with its
    /// orders' figures and its live stock (Postgres's count where Redis has none), for
    /// the operators.
    pub async fn with_figures(
        &self,
        archived: bool,
        only: Option<ItemId>,
    ) -> anyhow::Result<Vec<(ItemFigures, i64)>> {
        let figures = records::items_with_figures(&self.parts.pool, archived, only).await?;
        let ids: Vec<_> = figures.iter().map(|f| f.item.id).collect();
        let live = self
            .parts
            .redis
            .remaining(&ids)
            .await
            .unwrap_or_else(|_| vec![None; ids.len()]);
        Ok(figures
            .into_iter()
            .zip(live)
            .map(|(f, live)| {
                let left = live.unwrap_or(i64::from(f.item.remaining_stock));
                (f, left)
            })
            .collect())
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
