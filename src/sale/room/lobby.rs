//! This instance's copies of the waiting rooms ([`RoomView`]), refreshed every
//! [`REFRESH`] with one Redis round trip per room on sale, and the batch of shoppers
//! heard of since the last liveness write.
//!
//! Polls read the copies and add to the batch: no Redis call per poll. The batch is
//! written once per [`HEARD_FLUSH`] per room (`RoomRedis::heard`), so a crowd polling
//! costs each instance one write a second per room, however large it is.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use chrono::Utc;

use super::join_times::JoinTimes;
use super::room_redis::{ReadFrom, RoomRedis};
use super::room_view::RoomView;
use crate::sale::item::ItemId;
use crate::sale::parts::SaleParts;

/// How often the copies are refreshed: what a poll's answer may lag behind Redis.
pub const REFRESH: Duration = Duration::from_millis(200);
/// How often the shoppers heard of are written.
pub const HEARD_FLUSH: Duration = Duration::from_secs(1);
/// A copy not refreshed for this long is stale: Redis is not answering.
pub const STALE_AFTER: Duration = Duration::from_secs(2);

/// One room's copy and when it was read.
#[derive(Debug, Clone)]
pub struct Held {
    /// The room's state as last read.
    pub view: RoomView,
    /// When it was read: older than [`STALE_AFTER`], it is stale.
    pub read_at: Instant,
    read: ReadFrom,
}

impl Held {
    /// Whether Redis has not answered for [`STALE_AFTER`].
    pub fn is_stale(&self) -> bool {
        self.read_at.elapsed() > STALE_AFTER
    }
}

/// This instance's copies of the rooms on sale and the shoppers heard of (see the module
/// docs).
pub struct Lobby {
    parts: SaleParts,
    redis: Arc<RoomRedis>,
    views: ArcSwap<HashMap<ItemId, Arc<Held>>>,
    heard: Mutex<HashMap<ItemId, HashSet<u64>>>,
    /// This instance's joiners not reached yet, for their waits.
    join_times: JoinTimes,
}

impl Lobby {
    /// No copies yet, over the sale's parts and the room's scripts.
    pub fn new(parts: SaleParts, redis: Arc<RoomRedis>) -> Self {
        Self {
            parts,
            redis,
            views: ArcSwap::default(),
            heard: Mutex::default(),
            join_times: JoinTimes::default(),
        }
    }

    /// This instance's copy of `item`'s room, if it has read one.
    pub fn held(&self, item: ItemId) -> Option<Arc<Held>> {
        self.views.load().get(&item).cloned()
    }

    /// Notes a poll of the shopper with join index `index`, for the next liveness write.
    pub fn heard(&self, item: ItemId, index: u64) {
        let mut heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        heard.entry(item).or_default().insert(index);
    }

    /// A new joiner of `item`'s room on this instance, with join index `index`, at
    /// `at_ms`: its wait is counted when a refresh sees it admitted.
    pub fn joined(&self, item: ItemId, index: u64, at_ms: i64) {
        self.join_times.joined(item, index, at_ms);
    }

    /// Reads the rooms of `items` (those on, whose sale has not ended). A room that
    /// fails to read keeps its old copy, which turns stale. Rooms no longer listed are
    /// dropped. The waits of this instance's joiners the new steps admitted are counted.
    pub async fn refresh(&self, items: &[ItemId]) {
        let now_ms = Utc::now().timestamp_millis();
        let known = self.views.load_full();
        let reads = items.iter().map(|item| {
            let held = known.get(item).cloned();
            async move {
                let from = held.as_ref().map(|h| h.read).unwrap_or_default();
                match self.redis.read(*item, from, now_ms).await {
                    Ok(update) => {
                        let read = ReadFrom {
                            rounds: from.rounds + update.new_rounds.len(),
                            steps: from.steps + update.new_steps.len(),
                        };
                        let base = held.map(|h| h.view.clone()).unwrap_or_default();
                        let steps = update.new_steps.clone();
                        let view = base.advanced(update, now_ms);
                        let waits = self.join_times.reached(*item, &steps, &view);
                        if !waits.is_empty() {
                            self.parts.metrics.tally.items.count(item.get(), |cells| {
                                waits.iter().for_each(|wait| cells.waited(*wait))
                            });
                        }
                        Some((*item, Arc::new(Held { view, read_at: Instant::now(), read })))
                    }
                    Err(e) => {
                        tracing::debug!(item.id = %item, error = %format!("{e:#}"), "could not read a waiting room");
                        held.map(|held| (*item, held))
                    }
                }
            }
        });
        let fresh: HashMap<ItemId, Arc<Held>> = futures_util::future::join_all(reads)
            .await
            .into_iter()
            .flatten()
            .collect();
        let waiting: u64 = fresh.values().map(|h| h.view.counters.waiting()).sum();
        self.parts.metrics.queue_waiting.set(waiting as i64);
        self.views.store(Arc::new(fresh));
        self.join_times.keep_only(items);
    }

    /// Refreshes the copies every [`REFRESH`] and writes the liveness batch every
    /// [`HEARD_FLUSH`], for as long as the process runs. The rooms read are those on
    /// whose queue has opened and whose sale has not ended.
    pub async fn run(self: Arc<Self>, rooms: Arc<super::rooms::Rooms>) {
        let refresh = crate::background::every("waiting room copies", REFRESH, || {
            let lobby = Arc::clone(&self);
            let rooms = Arc::clone(&rooms);
            async move {
                let now = Utc::now();
                let open: Vec<ItemId> = rooms
                    .enabled()
                    .into_iter()
                    .filter(|(item, room)| {
                        lobby.parts.catalog.get(*item).is_some_and(|item| {
                            room.opens_at(item.starts_at) <= now && now < item.ends_at
                        })
                    })
                    .map(|(item, _)| item)
                    .collect();
                lobby.refresh(&open).await;
                Ok(())
            }
        });
        let flush = crate::background::every("waiting room liveness", HEARD_FLUSH, || {
            let lobby = Arc::clone(&self);
            async move {
                lobby.flush_heard().await;
                Ok(())
            }
        });
        futures_util::future::join(refresh, flush).await;
    }

    /// Writes the shoppers heard of since the last call, one call per room. A failed
    /// write is dropped: the next polls are heard again, well within the abandonment
    /// time.
    pub async fn flush_heard(&self) {
        let batch = std::mem::take(&mut *self.heard.lock().unwrap_or_else(|p| p.into_inner()));
        let now_ms = Utc::now().timestamp_millis();
        for (item, indexes) in batch {
            let Some(on_sale) = self.parts.catalog.get(item) else {
                continue;
            };
            let indexes: Vec<u64> = indexes.into_iter().collect();
            let expire_at = self.parts.lifetime.expire_at_ms(&on_sale);
            if let Err(e) = self.redis.heard(item, &indexes, now_ms, expire_at).await {
                tracing::warn!(item.id = %item, error = %format!("{e:#}"), "could not record waiting shoppers");
            }
        }
    }
}
