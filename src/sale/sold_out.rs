//! The sold-out fast path.
//!
//! Most of a flash sale's traffic arrives after the stock is gone. Every instance keeps
//! the set of sold-out items in memory and answers 409 `SOLD_OUT` from it, before the
//! limiter and without any Redis call. Instances learn of a change through Redis
//! pub/sub (channel `<prefix>:sold-out`, payload `<item id>:0` for sold out and
//! `<item id>:1` for back in stock) and, as a safety net against a lost message, from
//! a periodic read of the stock counters.
//!
//! Both sides of the channel live here: [`SoldOut::announce`] publishes what this
//! instance learned, [`SoldOut::listen`] applies what the others did.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use secrecy::ExposeSecret;

use super::item::ItemId;
use crate::metrics::{Metrics, RedisPurpose};
use crate::store::RedisStore;

/// This instance's sold-out items, and the channel that keeps every instance's alike.
pub struct SoldOut {
    board: SoldOutBoard,
    redis: RedisStore,
    metrics: Arc<Metrics>,
}

impl SoldOut {
    pub fn new(redis: RedisStore, metrics: Arc<Metrics>) -> Self {
        Self {
            board: SoldOutBoard::default(),
            redis,
            metrics,
        }
    }

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
        let mut publish = redis::cmd("PUBLISH");
        publish
            .arg(channel(self.redis.prefix()))
            .arg(message(item, sold_out));
        if let Err(e) = self.redis.call::<i64>(RedisPurpose::Other, &publish).await {
            tracing::warn!(item.id = %item, error = %e, "could not publish a sold-out change");
        }
    }

    /// Follows the channel forever, reconnecting after a second when Redis goes away.
    /// Pub/sub needs a connection of its own, hence the URLs: the one server's, or the
    /// cluster's nodes, tried in turn. On a cluster a classic `PUBLISH` reaches the
    /// subscribers of every node (the cluster bus forwards it), so one node is enough,
    /// and when it dies the next one takes over; what was published in between is
    /// caught by the periodic check (`Sale::refresh_sold_out`).
    pub async fn listen(self: Arc<Self>, urls: Vec<secrecy::SecretString>) {
        let channel = channel(self.redis.prefix());
        let apply = |item, sold_out| self.note(item, sold_out);
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

    pub fn len(&self) -> usize {
        self.items.read().map(|s| s.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn channel(prefix: &str) -> String {
    format!("{prefix}:sold-out")
}

fn message(item: ItemId, sold_out: bool) -> String {
    format!("{item}:{}", if sold_out { 0 } else { 1 })
}

fn parse(payload: &str) -> Option<(ItemId, bool)> {
    let (item, flag) = payload.split_once(':')?;
    let item = ItemId::try_from(item.parse::<i64>().ok()?).ok()?;
    match flag {
        "0" => Some((item, true)),
        "1" => Some((item, false)),
        _ => None,
    }
}

async fn follow(url: &str, channel: &str, apply: &impl Fn(ItemId, bool)) -> anyhow::Result<()> {
    let mut pubsub = redis::Client::open(url)?.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    let mut messages = pubsub.on_message();
    while let Some(msg) = messages.next().await {
        let payload: String = msg.get_payload()?;
        match parse(&payload) {
            Some((item, sold_out)) => apply(item, sold_out),
            None => tracing::warn!(payload, "ignoring a malformed sold-out message"),
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
        assert_eq!(parse(&message(item, true)), Some((item, true)));
        assert_eq!(parse(&message(item, false)), Some((item, false)));
        for bad in ["", "42", "x:0", "42:2", "0:1", "-1:0"] {
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
