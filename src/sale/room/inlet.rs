//! The inlet: the one loop that moves each waiting room forward, on whichever instance
//! holds its lock (`leader::run_led`, every [`PERIOD`]). Each step, per room on sale:
//! 1. **draw**: at the sale's start the pre-queue's round is sealed with a fresh seed;
//!    in random order, every [`ROUND`] the joiners since the last round; each round is
//!    recorded in Postgres (`waiting_room_rounds`) for an audit to replay;
//! 2. **admit**: `admitPerSecond` earns credit (at most a second's worth is kept); the
//!    step admits up to the credit, never more than `maxActive` live passes nor more
//!    live passes than units left (an admitted place holds its unit until its pass is
//!    used or expires), nothing while the item is paused; places whose shopper went
//!    quiet are skipped;
//! 3. every `MAY_RETURN_EVERY` steps, the units unpaid orders hold (Postgres) for the
//!    polls' `mayReturn`, and the close: once the item is sold out and no unit can come
//!    back (no unpaid order, none in flight, no live pass), the room is closed for good
//!    (`closed_at` in its state hash, `lua/room_close.lua`): polls answer `closed`, joins
//!    `ROOM_CLOSED`; units back (a stock raise, a repair) reopen it.
//!
//! Two instances running a step at once (a lock that expired mid-step) cannot admit a
//! place twice: `lua/room_admit.lua` runs only from the serving position it was given.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use super::lobby::Lobby;
use super::room_config::RoomConfig;
use super::room_redis::{AdmitStep, RoomMoment, RoomRedis};
use super::rooms::Rooms;
use crate::sale::item::Item;
use crate::sale::parts::SaleParts;

/// How often the inlet steps.
pub const PERIOD: Duration = Duration::from_millis(100);
/// How long one round of the random order gathers joiners.
pub const ROUND: Duration = Duration::from_secs(1);
/// Steps between two reads of the units unpaid orders hold.
const MAY_RETURN_EVERY: u64 = 10;
/// Places looked at past the quota in one step, for those skipped as abandoned.
const SKIP_AHEAD: u64 = 512;

/// The loop that draws and admits (see the module docs); it runs on the instance holding
/// its lock.
pub struct Inlet {
    parts: SaleParts,
    rooms: Arc<Rooms>,
    lobby: Arc<Lobby>,
    redis: Arc<RoomRedis>,
    steps: AtomicU64,
}

impl Inlet {
    /// The inlet over the sale's parts, the rooms' settings, this instance's copies and the
    /// scripts.
    pub fn new(
        parts: SaleParts,
        rooms: Arc<Rooms>,
        lobby: Arc<Lobby>,
        redis: Arc<RoomRedis>,
    ) -> Self {
        Self {
            parts,
            rooms,
            lobby,
            redis,
            steps: AtomicU64::new(0),
        }
    }

    /// Steps every [`PERIOD`] while this instance holds the inlet's lock; `instance`
    /// names it in the lock.
    pub async fn run(self: Arc<Self>, instance: String) {
        let redis = self.parts.redis.store().clone();
        crate::sale::leader::run_led("room-inlet", PERIOD, redis, instance, || {
            let inlet = Arc::clone(&self);
            async move { inlet.step().await }
        })
        .await
    }

    /// One step over every room on sale. A room that fails is logged; the others go on.
    pub async fn step(&self) -> anyhow::Result<()> {
        let step = self.steps.fetch_add(1, Ordering::Relaxed);
        let now = Utc::now();
        for (item_id, room) in self.rooms.enabled() {
            let Some(item) = self.parts.catalog.get(item_id) else {
                continue;
            };
            if now < item.starts_at || now >= item.ends_at {
                continue;
            }
            if let Err(e) = self.advance(&item, &room, step).await {
                tracing::warn!(item.id = %item.id, error = %format!("{e:#}"), "waiting room step failed");
            }
        }
        Ok(())
    }

    async fn advance(&self, item: &Item, room: &RoomConfig, step: u64) -> anyhow::Result<()> {
        let now_ms = Utc::now().timestamp_millis();
        let moment = RoomMoment::of(item, room.order, self.parts.lifetime, now_ms);
        let expire_at = moment.expire_at_ms;
        let seed = fresh_seed();
        let sealed = self
            .redis
            .seal(item.id, &moment, seed, ROUND.as_millis() as u64)
            .await?;
        if let Some((round, drawn)) = sealed {
            tracing::info!(item.id = %item.id, round, first = drawn.first, size = drawn.size, "waiting room round drawn");
            // The audit's copy; Redis keeps the seed too, so a failed write loses no place.
            let recorded = sqlx::query!(
                "INSERT INTO waiting_room_rounds (item_id, round, first_index, size, seed) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                item.id.get(),
                round as i32,
                drawn.first as i64,
                drawn.size as i64,
                drawn.seed as i64,
            )
            .execute(&self.parts.pool)
            .await;
            if let Err(e) = recorded {
                tracing::warn!(item.id = %item.id, round, error = %e, "could not record a waiting room round");
            }
        }
        if step.is_multiple_of(MAY_RETURN_EVERY) {
            self.note_may_return(item, expire_at).await?;
        }
        self.admit(item, room, now_ms, expire_at).await
    }

    async fn admit(
        &self,
        item: &Item,
        room: &RoomConfig,
        now_ms: i64,
        expire_at: i64,
    ) -> anyhow::Result<()> {
        // The rounds come from the lobby's copy (they change only when this loop seals
        // one); the counters are read fresh.
        let Some(held) = self.lobby.held(item.id) else {
            return Ok(());
        };
        let fresh = self.redis.read(item.id, far_past_the_end(), now_ms).await?;
        let counters = &fresh.counters;
        let rate = f64::from(room.admit_per_second);
        let credit = match counters.credit_at_ms {
            Some(at) => (counters.credit + rate * (now_ms - at).max(0) as f64 / 1_000.0).min(rate),
            None => 0.0,
        };
        // Never more live passes than units left: each unused pass holds one, so what
        // a shopper does after admission (polling sooner, buying faster) cannot take
        // another admitted shopper's unit. Reservations in flight have taken theirs from
        // the counter already; a used pass has left the live set.
        let unheld = fresh
            .stock
            .unwrap_or(0)
            .saturating_sub(fresh.live as i64)
            .max(0) as u64;
        let slots = u64::from(room.max_active)
            .saturating_sub(fresh.live)
            .min(unheld);
        let quota = if !item.paused {
            (credit.floor() as u64).min(slots)
        } else {
            0
        };
        // Only places the copy can name the joiner of (its rounds may lag a seal).
        let placed = counters.mapped.min(held.view.counters.mapped);
        let end = placed.min(counters.serving + quota + SKIP_AHEAD);
        let candidates: Vec<(u64, u64)> = (counters.serving..end)
            .map_while(|place| Some((place, held.view.index_at(place)?)))
            .collect();
        if quota == 0 || candidates.is_empty() {
            if counters.credit_at_ms.is_none() {
                // Start earning credit from now.
                let first = AdmitStep {
                    quota: 0,
                    candidates: Vec::new(),
                    ..self.step_args(room, counters.serving, now_ms, 0.0, expire_at)
                };
                self.redis.admit(item.id, &first).await?;
            }
            return Ok(());
        }
        let args = AdmitStep {
            quota,
            candidates,
            ..self.step_args(room, counters.serving, now_ms, credit, expire_at)
        };
        if let Some(done) = self.redis.admit(item.id, &args).await? {
            let metrics = &self.parts.metrics;
            metrics.queue_admissions.inc_by(done.admitted);
            metrics.queue_abandoned.inc_by(done.skipped);
            let stepped = |cells: &crate::tally::per_item::ItemCells| {
                cells.stepped(done.admitted, done.skipped)
            };
            metrics.tally.items.count(item.id.get(), stepped);
        }
        Ok(())
    }

    fn step_args(
        &self,
        room: &RoomConfig,
        serving: u64,
        now_ms: i64,
        credit: f64,
        expire_at_ms: i64,
    ) -> AdmitStep {
        AdmitStep {
            serving,
            now_ms,
            abandon_ms: room.abandon_after.as_millis() as u64,
            pass_ttl_ms: room.pass_ttl.as_millis() as u64,
            quota: 0,
            credit,
            expire_at_ms,
            candidates: Vec::new(),
        }
    }

    /// The units unpaid orders hold, for the polls, then the close (see the module docs):
    /// Redis's reservations in flight are read before Postgres, so an order Postgres did
    /// not have yet cannot be missed (`lua/room_close.lua` says how).
    async fn note_may_return(&self, item: &Item, expire_at: i64) -> anyhow::Result<()> {
        let watch = self.redis.watch_close(item.id).await?;
        let unpaid = sqlx::query!(
            r#"SELECT count(*) FILTER (WHERE state = 'pending_payment') AS "units!",
                   max(pay_by) FILTER (WHERE state = 'pending_payment') AS until,
                   count(*) FILTER (WHERE state IN ('cancelled', 'expired')
                                    AND returned_at IS NULL) AS "returning!"
               FROM orders
               WHERE item_id = $1 AND (state = 'pending_payment' OR returned_at IS NULL)"#,
            item.id.get(),
        )
        .fetch_one(&self.parts.pool)
        .await?;
        let until = unpaid.until.map(|at| at.timestamp_millis());
        self.redis
            .note_may_return(item.id, unpaid.units.max(0) as u64, until, expire_at)
            .await?;
        let drained = unpaid.units == 0 && unpaid.returning == 0;
        let now_ms = Utc::now().timestamp_millis();
        let closed = self
            .redis
            .close(item.id, watch, drained, now_ms, expire_at)
            .await?;
        if closed == Some(now_ms) {
            tracing::info!(item.id = %item.id, "waiting room closed: sold out, no unit can come back");
        }
        Ok(())
    }
}

/// A read position past any list's end: the counters only.
fn far_past_the_end() -> super::room_redis::ReadFrom {
    super::room_redis::ReadFrom {
        rounds: isize::MAX as usize,
        steps: isize::MAX as usize,
    }
}

/// A seed for a round: 64 random bits from the operating system (through a v4 uuid),
/// never 0 (the identity).
fn fresh_seed() -> u64 {
    let (high, low) = uuid::Uuid::new_v4().as_u64_pair();
    (high ^ low).max(1)
}
