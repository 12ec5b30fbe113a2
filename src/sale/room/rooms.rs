//! The waiting rooms' settings: stored in Postgres (`waiting_rooms`), cached in every
//! instance and reloaded every second with the catalog, so an operator's change reaches
//! every instance's joins, polls and listing within a second (and this one at once).
//! Whether a purchase needs a pass is not read from here: the reservation script reads
//! the item's room gate in Redis (`stock::RoomGates`), which the change sets before its
//! 200.
//!
//! Reloads can overlap and finish out of order; a room's `version` only grows, so the
//! cache keeps, room by room, the newest version it has seen.
//!
//! A stored order this build does not know (written by a newer build, or by hand) is
//! not read as another: the room keeps the settings this instance had (the default,
//! off, if it had none), every reload logs the item and the word at `error`, and the
//! operator's read of the room answers 503 `QUEUE_UNAVAILABLE` until a change stores a
//! known word ([`Rooms::unreadable`]).

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};

use super::room_config::RoomConfig;
use crate::sale::item::ItemId;
use crate::sale::records;
use crate::vocabulary::RoomOrder;

/// The waiting rooms' settings, cached from Postgres (see the module docs); one per
/// process.
pub struct Rooms {
    pool: PgPool,
    cache: ArcSwap<Cache>,
}

#[derive(Default, Clone)]
struct Cache {
    rooms: HashMap<ItemId, Arc<RoomConfig>>,
    /// Rows whose order this build cannot read, by item: their version and word.
    unreadable: HashMap<ItemId, (i64, String)>,
}

/// A stored room whose `order_kind` is no `RoomOrder` word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("item {item}'s waiting room is stored with an unknown order {word:?} (version {version})")]
pub struct UnreadableRoom {
    /// The item's id.
    pub item: i64,
    /// The row's version.
    pub version: i64,
    /// The stored word this build does not know.
    pub word: String,
}

struct Row {
    item_id: i64,
    enabled: bool,
    order_kind: String,
    prequeue_starts_at: Option<DateTime<Utc>>,
    admit_per_second: i32,
    max_active: i32,
    pass_ttl_secs: i32,
    abandon_after_secs: i32,
    message: String,
    version: i64,
}

impl Row {
    fn config(&self) -> Result<RoomConfig, UnreadableRoom> {
        let secs = |s: i32| std::time::Duration::from_secs(s.max(0) as u64);
        let order: RoomOrder = self.order_kind.parse().map_err(|_| UnreadableRoom {
            item: self.item_id,
            version: self.version,
            word: self.order_kind.clone(),
        })?;
        Ok(RoomConfig {
            enabled: self.enabled,
            order,
            prequeue_starts_at: self.prequeue_starts_at,
            admit_per_second: self.admit_per_second.max(1) as u32,
            max_active: self.max_active.max(1) as u32,
            pass_ttl: secs(self.pass_ttl_secs),
            abandon_after: secs(self.abandon_after_secs),
            message: self.message.clone(),
            version: self.version,
        })
    }
}

impl Rooms {
    /// An empty cache over `pool`; the first reload fills it.
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            cache: ArcSwap::default(),
        }
    }

    /// The item's room as this instance knows it; the default (off) when it has none.
    pub fn get(&self, item: ItemId) -> Arc<RoomConfig> {
        self.cache
            .load()
            .rooms
            .get(&item)
            .cloned()
            .unwrap_or_default()
    }

    /// The item's stored room when this build cannot read it (its order unknown), newer
    /// than the settings [`Self::get`] answers.
    pub fn unreadable(&self, item: ItemId) -> Option<UnreadableRoom> {
        let cache = self.cache.load();
        let (version, word) = cache.unreadable.get(&item)?;
        Some(UnreadableRoom {
            item: item.get(),
            version: *version,
            word: word.clone(),
        })
    }

    /// The rooms that are on.
    pub fn enabled(&self) -> Vec<(ItemId, Arc<RoomConfig>)> {
        self.cache
            .load()
            .rooms
            .iter()
            .filter(|(_, room)| room.enabled)
            .map(|(item, room)| (*item, Arc::clone(room)))
            .collect()
    }

    /// Reads every room from Postgres. A row it cannot read is logged and marked
    /// (module doc); the others are read all the same, and the reload succeeds, so the
    /// refresh that calls it goes on to its other work.
    pub async fn reload(&self) -> anyhow::Result<()> {
        let rows = sqlx::query_as!(
            Row,
            "SELECT item_id, enabled, order_kind, prequeue_starts_at, admit_per_second, \
             max_active, pass_ttl_secs, abandon_after_secs, message, version FROM waiting_rooms"
        )
        .fetch_all(&self.pool)
        .await?;
        let (read, unreadable): (Vec<_>, Vec<_>) = rows
            .iter()
            .map(|row| row.config().map(|room| (row.item_id, room)))
            .partition(Result::is_ok);
        let unreadable: Vec<UnreadableRoom> =
            unreadable.into_iter().filter_map(Result::err).collect();
        for room in &unreadable {
            tracing::error!(item.id = room.item, version = room.version, order = %room.word, "a waiting room's stored order is unknown: the room keeps its previous settings");
        }
        self.install(read.into_iter().filter_map(Result::ok), unreadable);
        Ok(())
    }

    /// Stores `room` for `item` as the next version, with its `room` entry in the item's
    /// history (`old` → the stored room, by `by`) in the same transaction, unless another
    /// change landed since `room` was read (its version no longer the stored one): then
    /// `None`, nothing written, and the caller reads again.
    pub async fn save(
        &self,
        item: ItemId,
        old: &RoomConfig,
        room: &RoomConfig,
        by: &str,
    ) -> anyhow::Result<Option<RoomConfig>> {
        let mut tx = self.pool.begin().await?;
        let Some(saved) = store(&mut tx, item, old, room, by).await? else {
            return Ok(None);
        };
        tx.commit().await?;
        self.adopt(item, &saved);
        Ok(Some(saved))
    }

    /// Puts a room this process stored (`store`, committed) in the cache at once, so this
    /// instance's next read sees it before the next reload.
    pub fn adopt(&self, item: ItemId, saved: &RoomConfig) {
        self.install([(item.get(), saved.clone())], Vec::new());
    }

    /// Puts rooms in the cache, each only over an older version of itself, and marks the
    /// unreadable ones newer than (or as new as) what the cache holds. A readable room
    /// clears a mark of its version or older: a row fixed by hand keeps its version.
    fn install(
        &self,
        rooms: impl IntoIterator<Item = (i64, RoomConfig)>,
        unreadable: Vec<UnreadableRoom>,
    ) {
        let fresh: Vec<(ItemId, RoomConfig)> = rooms
            .into_iter()
            .filter_map(|(id, room)| Some((ItemId::try_from(id).ok()?, room)))
            .collect();
        let broken: Vec<(ItemId, UnreadableRoom)> = unreadable
            .into_iter()
            .filter_map(|room| Some((ItemId::try_from(room.item).ok()?, room)))
            .collect();
        self.cache.rcu(|cache| {
            let mut next = Cache::clone(cache);
            for (item, room) in &fresh {
                if next
                    .rooms
                    .get(item)
                    .is_none_or(|known| known.version < room.version)
                {
                    next.rooms.insert(*item, Arc::new(room.clone()));
                }
                if next
                    .unreadable
                    .get(item)
                    .is_some_and(|(version, _)| *version <= room.version)
                {
                    next.unreadable.remove(item);
                }
            }
            for (item, room) in &broken {
                let newest = next
                    .rooms
                    .get(item)
                    .is_none_or(|known| known.version <= room.version)
                    && next
                        .unreadable
                        .get(item)
                        .is_none_or(|(version, _)| *version <= room.version);
                if newest {
                    next.unreadable
                        .insert(*item, (room.version, room.word.clone()));
                }
            }
            next
        });
    }
}

/// Writes `room` for `item` in `tx` as the next version (the first, for an item without
/// one), unless the stored version is no longer `room.version` (`None`: nothing
/// written), and records the change in the item's history (`records::record_room`: `old`
/// before, the stored room after, by `by`) when a setting changed. The caller commits: the room, its audit and
/// whatever else the transaction holds (the item itself, when the room is made with it)
/// land together or not at all.
pub async fn store(
    tx: &mut Transaction<'_, Postgres>,
    item: ItemId,
    old: &RoomConfig,
    room: &RoomConfig,
    by: &str,
) -> anyhow::Result<Option<RoomConfig>> {
    let row = sqlx::query_as!(
        Row,
        "INSERT INTO waiting_rooms (item_id, enabled, order_kind, prequeue_starts_at, \
             admit_per_second, max_active, pass_ttl_secs, abandon_after_secs, message, \
             version) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10, 1) \
         ON CONFLICT (item_id) DO UPDATE SET enabled = $2, order_kind = $3, \
             prequeue_starts_at = $4, admit_per_second = $5, max_active = $6, \
             pass_ttl_secs = $7, abandon_after_secs = $8, message = $10, \
             version = waiting_rooms.version + 1, changed_at = now() \
         WHERE waiting_rooms.version = $9 \
         RETURNING item_id, enabled, order_kind, prequeue_starts_at, admit_per_second, \
             max_active, pass_ttl_secs, abandon_after_secs, message, version",
        item.get(),
        room.enabled,
        room.order.label(),
        room.prequeue_starts_at,
        room.admit_per_second as i32,
        room.max_active as i32,
        room.pass_ttl.as_secs() as i32,
        room.abandon_after.as_secs() as i32,
        room.version,
        room.message.as_str(),
    )
    .fetch_optional(&mut **tx)
    .await?;
    let Some(row) = row else { return Ok(None) };
    // The word written is this build's own, so the row reads back.
    let saved = row.config()?;
    // An edit that changes no setting still takes a version (so it is checked against
    // a concurrent change like any other) but is no change to record: the dashboard's
    // form sends every field.
    if saved.settings() != old.settings() {
        records::record_room(tx, item, by, old, &saved).await?;
    }
    Ok(Some(saved))
}
