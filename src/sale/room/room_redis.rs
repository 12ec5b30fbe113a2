//! The waiting room's Redis side: the four scripts (`lua/room_join.lua`,
//! `lua/room_seal.lua`, `lua/room_admit.lua`, `lua/room_close.lua`), the lobby's read of
//! a room, and the batched liveness write. Every key is the item's (`ItemKeys::room_wide`), in the
//! item's slot, so the reservation script can free a used pass's slot in its own step.

use std::collections::HashMap;

use redis::Script;

use super::room_view::{Counters, Round, ViewUpdate};
use super::step::Step;
use crate::domain::UserId;
use crate::metrics::RedisPurpose;
use crate::sale::item::{Item, ItemId};
use crate::sale::stock::{KeyLifetime, StockRedis};
use crate::vocabulary::RoomOrder;

/// What a join answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    /// The joiner's index: its place in the order of joining.
    pub index: u64,
    /// False when the user had joined before (same index).
    pub new: bool,
    /// The index is its own place already (a fifo join after the draw).
    pub placed: bool,
}

/// What the join and seal scripts need to know of the moment and the room.
#[derive(Debug, Clone, Copy)]
pub struct RoomMoment {
    /// Now, in milliseconds since the epoch (the app's clock).
    pub now_ms: i64,
    /// The sale's start, ms: joins before it make the pre-queue that the draw shuffles.
    pub sale_starts_ms: i64,
    /// Goes down to the scripts as its word (`RoomOrder::label`); they refuse a word they
    /// do not know, so a new order cannot quietly run as another.
    pub order: RoomOrder,
    /// When the room's keys expire (`KeyLifetime`).
    pub expire_at_ms: i64,
}

impl RoomMoment {
    /// `item`'s room, in `order`, at `now_ms`: the one way the join and the inlet build it.
    pub fn of(item: &Item, order: RoomOrder, lifetime: KeyLifetime, now_ms: i64) -> Self {
        Self {
            now_ms,
            sale_starts_ms: item.starts_at.timestamp_millis(),
            order,
            expire_at_ms: lifetime.expire_at_ms(item),
        }
    }
}

/// The arguments of one inlet step (`lua/room_admit.lua`).
#[derive(Debug, Clone)]
pub struct AdmitStep {
    /// The serving position the caller read: the step runs only if it still holds.
    pub serving: u64,
    /// Now, in ms since the epoch.
    pub now_ms: i64,
    /// A place whose shopper was not heard of for this long (ms) is skipped.
    pub abandon_ms: u64,
    /// A pass's lifetime, ms.
    pub pass_ttl_ms: u64,
    /// Admit at most this many.
    pub quota: u64,
    /// The admission credit before this step, admissions not taken off yet.
    pub credit: f64,
    /// When the room's keys expire, ms.
    pub expire_at_ms: i64,
    /// (place, join index) from `serving` on.
    pub candidates: Vec<(u64, u64)>,
}

/// What an inlet step did; `None` from [`RoomRedis::admit`]: another instance moved
/// the position first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// Places admitted by this step.
    pub admitted: u64,
    /// The serving position after it.
    pub serving: u64,
    /// Places skipped by it (their shopper gone).
    pub skipped: u64,
}

/// How far a refresh has read the append-only lists.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFrom {
    /// Rounds already read.
    pub rounds: usize,
    /// Steps already read.
    pub steps: usize,
}

/// What the close's first read saw (`lua/room_close.lua`'s step A).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseWatch {
    /// The stock counter's version.
    pub version: i64,
    /// Reservations in flight.
    pub pending: u64,
}

/// The waiting room's scripts, built once; one per process.
pub struct RoomRedis {
    redis: StockRedis,
    join: Script,
    seal: Script,
    admit: Script,
    close: Script,
}

impl RoomRedis {
    /// The three scripts over `redis`'s item keys.
    pub fn new(redis: StockRedis) -> Self {
        Self {
            redis,
            join: Script::new(include_str!("../../../lua/room_join.lua")),
            seal: Script::new(include_str!("../../../lua/room_seal.lua")),
            admit: Script::new(include_str!("../../../lua/room_admit.lua")),
            close: Script::new(include_str!("../../../lua/room_close.lua")),
        }
    }

    /// Joins `user` to `item`'s room (`lua/room_join.lua`); a second join answers the same
    /// index; `None` when the room is closed for good.
    pub async fn join(
        &self,
        item: ItemId,
        user: UserId,
        at: &RoomMoment,
    ) -> anyhow::Result<Option<Joined>> {
        let mut call = self.join.prepare_invoke();
        for key in self.redis.keys(item).room_wide() {
            call.key(key);
        }
        call.arg(user.get())
            .arg(at.now_ms)
            .arg(at.sale_starts_ms)
            .arg(at.order.label())
            .arg(at.expire_at_ms);
        let (index, new, placed): (i64, i64, i64) = self
            .redis
            .call(RedisPurpose::Queue, "join a waiting room", &call)
            .await?;
        Ok(u64::try_from(index).ok().map(|index| Joined {
            index,
            new: new == 1,
            placed: placed == 1,
        }))
    }

    /// The close's first read (see `lua/room_close.lua`): before the inlet reads
    /// Postgres.
    pub async fn watch_close(&self, item: ItemId) -> anyhow::Result<CloseWatch> {
        let keys = self.redis.keys(item);
        let mut pipe = redis::pipe();
        pipe.get(keys.version()).zcard(keys.pending());
        let (version, pending): (Option<i64>, u64) = self
            .redis
            .call(RedisPurpose::Queue, "watch a waiting room's close", &pipe)
            .await?;
        Ok(CloseWatch {
            version: version.unwrap_or(0),
            pending,
        })
    }

    /// Closes the room if no unit can come back, or reopens it if units are back
    /// (`lua/room_close.lua`); `drained`: Postgres has no unpaid order nor a unit on its
    /// way back. Answers the room's `closed_at` after the call (ms), `None` when open.
    pub async fn close(
        &self,
        item: ItemId,
        seen: CloseWatch,
        drained: bool,
        now_ms: i64,
        expire_at_ms: i64,
    ) -> anyhow::Result<Option<i64>> {
        let keys = self.redis.keys(item);
        let mut call = self.close.prepare_invoke();
        call.key(keys.room())
            .key(keys.stock())
            .key(keys.version())
            .key(keys.pending())
            .key(keys.room_live())
            .arg(seen.version)
            .arg(i64::from(drained && seen.pending == 0))
            .arg(now_ms)
            .arg(expire_at_ms);
        let closed: i64 = self
            .redis
            .call(RedisPurpose::Queue, "close a waiting room", &call)
            .await?;
        Ok((closed > 0).then_some(closed))
    }

    /// Seals what can be sealed, shuffling with `seed`; the round recorded, if any.
    pub async fn seal(
        &self,
        item: ItemId,
        at: &RoomMoment,
        seed: u64,
        round_ms: u64,
    ) -> anyhow::Result<Option<(u32, Round)>> {
        let mut call = self.seal.prepare_invoke();
        for key in self.redis.keys(item).room_wide() {
            call.key(key);
        }
        call.arg(at.now_ms)
            .arg(at.sale_starts_ms)
            .arg(seed.to_string())
            .arg(at.order.label())
            .arg(at.expire_at_ms)
            .arg(round_ms);
        let (round, first, size): (i64, u64, u64) = self
            .redis
            .call(RedisPurpose::Queue, "seal a waiting room's round", &call)
            .await?;
        Ok(u32::try_from(round)
            .ok()
            .map(|round| (round, Round { first, size, seed })))
    }

    /// Runs one inlet step (`lua/room_admit.lua`); `None` when another instance moved the
    /// serving position first.
    pub async fn admit(&self, item: ItemId, step: &AdmitStep) -> anyhow::Result<Option<Admitted>> {
        let mut call = self.admit.prepare_invoke();
        for key in self.redis.keys(item).room_wide() {
            call.key(key);
        }
        call.arg(step.serving)
            .arg(step.now_ms)
            .arg(step.abandon_ms)
            .arg(step.pass_ttl_ms)
            .arg(step.quota)
            .arg(step.credit)
            .arg(step.expire_at_ms);
        for (place, index) in &step.candidates {
            call.arg(place).arg(index);
        }
        let (admitted, serving, skipped): (i64, u64, u64) = self
            .redis
            .call(RedisPurpose::Queue, "admit from a waiting room", &call)
            .await?;
        Ok(u64::try_from(admitted).ok().map(|admitted| Admitted {
            admitted,
            serving,
            skipped,
        }))
    }

    /// One room's state in one round trip: counters, the rounds and steps after `from`,
    /// the stock, the unsettled reservations, the live passes as of `now_ms`.
    pub async fn read(
        &self,
        item: ItemId,
        from: ReadFrom,
        now_ms: i64,
    ) -> anyhow::Result<ViewUpdate> {
        let keys = self.redis.keys(item);
        let mut pipe = redis::pipe();
        pipe.hgetall(keys.room())
            .lrange(keys.room_rounds(), from.rounds as isize, -1)
            .lrange(keys.room_steps(), from.steps as isize, -1)
            .get(keys.stock())
            .zcard(keys.pending())
            .zcount(keys.room_live(), now_ms, "+inf");
        type Read = (
            HashMap<String, String>,
            Vec<String>,
            Vec<String>,
            Option<i64>,
            u64,
            u64,
        );
        let (hash, rounds, steps, stock, pending, live): Read = self
            .redis
            .call(RedisPurpose::Queue, "read a waiting room", &pipe)
            .await?;
        // A record that does not parse would shift every later one: refuse the read
        // rather than answer from a wrong copy.
        let new_rounds = rounds
            .iter()
            .map(|r| Round::parse(r).ok_or_else(|| anyhow::anyhow!("unreadable round {r:?}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let new_steps = steps
            .iter()
            .map(|s| Step::parse(s).ok_or_else(|| anyhow::anyhow!("unreadable step {s:?}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(ViewUpdate {
            counters: Counters::from_hash(&hash),
            new_rounds,
            new_steps,
            stock,
            pending,
            live,
        })
    }

    /// Records that the shoppers with these join indexes were heard of at `now_ms`: one
    /// call for every poll this instance served in the last period.
    /// The key keeps the room's expiry (`expire_at_ms`): a write never leaves a key
    /// that lives forever.
    pub async fn heard(
        &self,
        item: ItemId,
        indexes: &[u64],
        now_ms: i64,
        expire_at_ms: i64,
    ) -> anyhow::Result<()> {
        if indexes.is_empty() {
            return Ok(());
        }
        let key = self.redis.keys(item).room_alive();
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(&key);
        for index in indexes {
            zadd.arg(now_ms).arg(index);
        }
        let mut pipe = redis::pipe();
        pipe.add_command(zadd)
            .ignore()
            .pexpire_at(&key, expire_at_ms)
            .ignore();
        self.redis
            .call(
                RedisPurpose::Queue,
                "record waiting shoppers heard of",
                &pipe,
            )
            .await
    }

    /// Units held by unpaid orders, and the last deadline among them, for the polls'
    /// `mayReturn` (the inlet reads them from Postgres).
    pub async fn note_may_return(
        &self,
        item: ItemId,
        units: u64,
        until_ms: Option<i64>,
        expire_at_ms: i64,
    ) -> anyhow::Result<()> {
        let key = self.redis.keys(item).room();
        let until = until_ms.map(|ms| ms.to_string()).unwrap_or_default();
        let mut pipe = redis::pipe();
        pipe.hset_multiple(
            &key,
            &[
                ("may_return", units.to_string()),
                ("may_return_until", until),
            ],
        )
        .ignore()
        .pexpire_at(&key, expire_at_ms)
        .ignore();
        self.redis
            .call(RedisPurpose::Queue, "note units that may come back", &pipe)
            .await
    }
}
