//! The sold-out fast path, and the news of an operator's change.
//!
//! Most of a flash sale's traffic arrives after the stock is gone. Every instance keeps
//! the set of sold-out items in memory and answers 409 `SOLD_OUT` from it, before the
//! limiter and without any Redis call. Instances learn of a change through Redis
//! pub/sub (channel `<prefix>:sold-out`, payload `<item id>:0` for sold out and
//! `<item id>:1` for back in stock) and, as a safety net against a lost message, from
//! a periodic read of the stock counters.
//!
//! The same channel carries `<item id>:changed` when an operator changed an item (end,
//! archive, pause, resume, edit) or its waiting room: every instance then reloads at
//! once what its one-second timer reloads (`startup::tasks`), woken through
//! [`SoldOut::changed`]. Best effort: a lost message is late by a second at most, and
//! the commit refuses what the item's row refuses whatever a copy says
//! (`records::commit_orders`).
//!
//! Both sides of the channel live here: [`SoldOut::announce`] and
//! [`SoldOut::announce_change`] publish what this instance learned, [`SoldOut::listen`]
//! applies what the others did.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use secrecy::ExposeSecret;
use tokio::sync::Notify;

use super::item::ItemId;
use crate::metrics::{Metrics, RedisPurpose};
use crate::store::RedisStore;

/// This instance's sold-out items, and the channel that keeps every instance's alike.
pub struct SoldOut {
    board: SoldOutBoard,
    redis: RedisStore,
    metrics: Arc<Metrics>,
    /// Woken by an operator's change heard on the channel (this instance's own too):
    /// the catalog's refresh runs at once instead of at its next tick.
    changed: Notify,
}

impl SoldOut {
    /// An empty board over `redis`; [`SoldOut::listen`] keeps it current.
    pub fn new(redis: RedisStore, metrics: Arc<Metrics>) -> Self {
        Self {
            board: SoldOutBoard::default(),
            redis,
            metrics,
            changed: Notify::new(),
        }
    }

    /// Whether `item` is sold out, as this instance last heard: no Redis call.
    pub fn is_sold_out(&self, item: ItemId) -> bool {
        self.board.is_sold_out(item)
    }

    /// Applies a sold-out change learned from anywhere (this instance, the channel, the
    /// periodic check).
    pub fn note(&self, item: ItemId, sold_out: bool) {
        if self.board.set(item, sold_out) {
            tracing::info!(item.id = %item, sold_out, "sold-out state changed");
            self.metrics.sold_out_items.set(self.board.len() as i64);
        }
    }

    /// Records a change found here and publishes it to the other instances. A lost
    /// message is only late: the periodic check finds the change within a second.
    pub async fn announce(&self, item: ItemId, sold_out: bool) {
        self.note(item, sold_out);
        self.publish(item, News::SoldOut(sold_out)).await;
    }

    /// Tells every instance (this one too) that an operator changed `item` or its
    /// waiting room: each reloads its copies at once. A lost message is only late: the
    /// one-second reload finds the change.
    pub async fn announce_change(&self, item: ItemId) {
        self.publish(item, News::Changed).await;
    }

    /// Resolves at the next change heard on the channel (at once if one was heard since
    /// the last call): what wakes the catalog's refresh.
    pub async fn changed(&self) {
        self.changed.notified().await;
    }

    async fn publish(&self, item: ItemId, news: News) {
        let mut publish = redis::cmd("PUBLISH");
        publish
            .arg(channel(self.redis.prefix()))
            .arg(message(item, news));
        if let Err(e) = self.redis.call::<i64>(RedisPurpose::Other, &publish).await {
            tracing::warn!(item.id = %item, error = %e, "could not publish on the sale's channel");
        }
    }

    /// Applies what the channel said.
    fn hear(&self, item: ItemId, news: News) {
        match news {
            News::SoldOut(sold_out) => self.note(item, sold_out),
            News::Changed => {
                tracing::debug!(item.id = %item, "an operator changed an item: reloading");
                self.changed.notify_one();
            }
        }
    }

    /// Follows the channel forever, reconnecting after a second when Redis goes away.
    /// Pub/sub needs a connection of its own, hence the URLs: the one server's, or the
    /// cluster's nodes, tried in turn. On a cluster a classic `PUBLISH` reaches the
    /// subscribers of every node (the cluster bus forwards it), so one node is enough,
    /// and when it dies the next one takes over; what was published in between is
    /// caught by the periodic check (`Items::refresh_sold_out`).
    pub async fn listen(self: Arc<Self>, urls: Vec<secrecy::SecretString>) {
        let channel = channel(self.redis.prefix());
        let apply = |item, news| self.hear(item, news);
        for url in urls.iter().cycle() {
            if let Err(e) = follow(url.expose_secret(), &channel, &apply).await {
                tracing::warn!(error = %format!("{e:#}"), "sold-out channel lost, resubscribing");
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// The set itself, in memory.
#[derive(Default)]
pub struct SoldOutBoard {
    items: RwLock<HashSet<ItemId>>,
}

impl SoldOutBoard {
    /// Whether `item` is on the board.
    pub fn is_sold_out(&self, item: ItemId) -> bool {
        // A poisoned lock only means a writer panicked mid-insert; the set is still usable.
        self.items
            .read()
            .map(|s| s.contains(&item))
            .unwrap_or_else(|p| p.into_inner().contains(&item))
    }

    /// Records what is known; returns whether that changed anything here.
    pub fn set(&self, item: ItemId, sold_out: bool) -> bool {
        let mut items = self.items.write().unwrap_or_else(|p| p.into_inner());
        if sold_out {
            items.insert(item)
        } else {
            items.remove(&item)
        }
    }

    /// Items on the board.
    pub fn len(&self) -> usize {
        self.items.read().map(|s| s.len()).unwrap_or(0)
    }

    /// Whether no item is on the board.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn channel(prefix: &str) -> String {
    format!("{prefix}:sold-out")
}

/// What a message on the channel says of an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum News {
    /// Sold out (`true`) or back in stock.
    SoldOut(bool),
    /// An operator changed it or its waiting room: reload.
    Changed,
}

fn message(item: ItemId, news: News) -> String {
    let word = match news {
        News::SoldOut(true) => "0",
        News::SoldOut(false) => "1",
        News::Changed => "changed",
    };
    format!("{item}:{word}")
}

fn parse(payload: &str) -> Option<(ItemId, News)> {
    let (item, word) = payload.split_once(':')?;
    let item = ItemId::try_from(item.parse::<i64>().ok()?).ok()?;
    match word {
        "0" => Some((item, News::SoldOut(true))),
        "1" => Some((item, News::SoldOut(false))),
        "changed" => Some((item, News::Changed)),
        _ => None,
    }
}

async fn follow(url: &str, channel: &str, apply: &impl Fn(ItemId, News)) -> anyhow::Result<()> {
    let mut pubsub = redis::Client::open(url)?.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    let mut messages = pubsub.on_message();
    while let Some(msg) = messages.next().await {
        let payload: String = msg.get_payload()?;
        match parse(&payload) {
            Some((item, news)) => apply(item, news),
            None => tracing::warn!(
                payload,
                "ignoring a malformed message on the sale's channel"
            ),
        }
    }
    anyhow::bail!("subscription ended")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_ignored() {
        let item = ItemId::try_from(42).unwrap();
        for news in [News::SoldOut(true), News::SoldOut(false), News::Changed] {
            assert_eq!(parse(&message(item, news)), Some((item, news)));
        }
        for bad in [
            "",
            "42",
            "x:0",
            "42:2",
            "0:1",
            "-1:0",
            "42:change",
            "x:changed",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_board_remembers_and_forgets() {
        let board = SoldOutBoard::default();
        let item = ItemId::try_from(1).unwrap();
        assert!(!board.is_sold_out(item));
        assert!(board.set(item, true));
        assert!(!board.set(item, true), "no change the second time");
        assert!(board.is_sold_out(item));
        assert!(board.set(item, false));
        assert!(!board.is_sold_out(item));
    }
}
