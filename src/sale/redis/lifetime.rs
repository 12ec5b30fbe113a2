//! An item's keys over their life: when they expire ([`SaleRedis::keys_expire_at`]),
//! the stamp of that expiry on every one of them, and their rebuild from Postgres when
//! they are lost (`lua/restore_item.lua`).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use redis::Script;

use super::SaleRedis;
use crate::metrics::RedisPurpose;
use crate::sale::item::Item;
use crate::sale::postgres::ItemLedger;

static RESTORE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/restore_item.lua")));

impl SaleRedis {
    /// When `item`'s keys expire: its sale's end plus the payment deadline plus
    /// [`KEY_GRACE`]. Every order's deadline has passed by then, and the sweeper has had
    /// an hour to give back what they released; a give-back that comes later finds the
    /// keys gone and is recorded in Postgres alone.
    pub fn keys_expire_at(&self, item: &Item) -> DateTime<Utc> {
        item.ends_at
            .checked_add_signed(self.keys_outlive_sale)
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// [`Self::keys_expire_at`] in ms since the epoch, as the scripts take it.
    pub(super) fn expire_at_ms(&self, item: &Item) -> i64 {
        self.keys_expire_at(item).timestamp_millis()
    }

    /// Rebuilds `item`'s stock counter and buyers from Postgres's `ledger` when the
    /// counter is missing (see `lua/restore_item.lua`); a live counter is never
    /// overwritten. Returns whether the counter was (re)created.
    pub async fn restore(&self, item: &Item, ledger: &ItemLedger) -> anyhow::Result<bool> {
        let keys = self.keys(item.id);
        let mut invocation = RESTORE.prepare_invoke();
        invocation
            .key(keys.stock())
            .key(keys.buyers())
            .key(keys.returned())
            .key(keys.version())
            .arg(ledger.remaining)
            .arg(self.expire_at_ms(item))
            .arg(ledger.owed.len());
        for owed in &ledger.owed {
            invocation.arg(owed.order.to_string()).arg(owed.user.get());
        }
        invocation.arg(&ledger.buyers);
        let created: i64 = self
            .call(RedisPurpose::Other, "restore item", &invocation)
            .await?;
        Ok(created == 1)
    }

    /// Sets the expiry of every key of `item` (see [`Self::keys_expire_at`]); keys
    /// created since the last stamp (an orders hash, a buyers set) get theirs here.
    pub async fn stamp_expiry(&self, item: &Item) -> anyhow::Result<()> {
        let at = self.expire_at_ms(item);
        let mut pipe = redis::pipe();
        pipe.atomic();
        for key in self.keys(item.id).item_wide() {
            pipe.pexpire_at(key, at).ignore();
        }
        self.call(RedisPurpose::Other, "stamp key expiry", &pipe)
            .await
    }
}
