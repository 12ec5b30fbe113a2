//! Polls per ticket, limited in process: a poll costs no Redis call, and this keeps it
//! so, but one ticket polled without pause (242 729 polls in 10 s, issue 33) takes an
//! instance's cores from the sale.
//!
//! A token bucket per ticket (a shopper holds one ticket per item, so the key is the
//! user and the item, known before the ticket is checked): one poll refills every
//! `every_ms` (1 s by default: six times the page's one poll per `refreshIntervalSeconds`),
//! up to `burst` (20: a reload, several tabs and their first polls at once). Kept as
//! GCRA, one instant per ticket: the instant its bucket is full again. A refused poll
//! writes nothing and is answered 429 `POLLING_TOO_FAST` with when to come back.
//!
//! At most `tickets` buckets live in the table (about 100 bytes each); a full table
//! treats its keys as the limiter's fallback tables do ([`crate::limiter::key_table`]):
//! full buckets are swept, a bucket that is not refusing may leave, one that is refusing
//! never does, and a newcomer that finds no bucket that may leave is refused for a
//! second. Each instance keeps its own buckets: over `n` instances a ticket gets `n`
//! times the rate at most, and the load balancer spreads it.

use std::sync::Mutex;

use tokio::time::Instant;

use super::room_error::RoomError;
use crate::domain::UserId;
use crate::limiter::key_table::{Eviction, Held, KeyTable};
use crate::sale::item::ItemId;

/// The wait a newcomer is refused with when the table holds only refusing buckets.
const FULL_WAIT_MS: u64 = 1_000;

/// One ticket's bucket.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// When the bucket is full again: as good as absent from then on.
    full_at_ms: u64,
    /// When it holds a poll again (`full_at_ms` less the burst but one).
    next_at_ms: u64,
}

impl Held for Bucket {
    fn refuses(&self, now_ms: u64) -> bool {
        now_ms < self.next_at_ms
    }

    fn is_stale(&self, now_ms: u64) -> bool {
        now_ms >= self.full_at_ms
    }

    /// The polls it lacks to be full, as time: the emptier, the heavier.
    fn weight(&self, now_ms: u64) -> u64 {
        self.full_at_ms.saturating_sub(now_ms)
    }
}

/// The limits: one poll refilled every `every_ms`, at most `burst` saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollLimits {
    /// One poll is refilled every this many milliseconds.
    pub every_ms: u64,
    /// Most polls saved up.
    pub burst: u64,
    /// Most tickets' buckets held at once.
    pub tickets: usize,
}

/// The per-ticket poll buckets of this instance, in a bounded table (see the module docs).
pub struct PollBudget {
    table: Mutex<KeyTable<(i64, i64), Bucket>>,
    limits: PollLimits,
    epoch: Instant,
}

impl PollBudget {
    /// An empty budget with `limits`.
    pub fn new(limits: PollLimits) -> Self {
        Self {
            table: Mutex::new(KeyTable::new(limits.tickets, Eviction::NotRefusing)),
            limits: PollLimits {
                every_ms: limits.every_ms.max(1),
                burst: limits.burst.max(1),
                tickets: limits.tickets,
            },
            epoch: Instant::now(),
        }
    }

    /// Takes one poll of `user`'s ticket for `item` now (tokio's clock, which a test
    /// can pause), or says how long to wait.
    pub fn take(&self, item: ItemId, user: UserId) -> Result<(), RoomError> {
        let now_ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.take_at((item.get(), user.get()), now_ms)
            .map_err(|retry_after_ms| RoomError::PollingTooFast { retry_after_ms })
    }

    /// The decision at `now_ms` (ms since the budget's epoch): `Err` is the wait in ms.
    fn take_at(&self, key: (i64, i64), now_ms: u64) -> Result<(), u64> {
        let PollLimits {
            every_ms, burst, ..
        } = self.limits;
        let Ok(mut table) = self.table.lock() else {
            return Err(FULL_WAIT_MS); // poisoned: refusing is the safe answer for a limit
        };
        let tolerance = (burst - 1).saturating_mul(every_ms);
        let full_at = table.get(&key).map_or(now_ms, |b| b.full_at_ms.max(now_ms));
        if full_at - now_ms > tolerance {
            return Err(full_at - now_ms - tolerance);
        }
        let full_at_ms = full_at.saturating_add(every_ms);
        let bucket = Bucket {
            full_at_ms,
            next_at_ms: full_at_ms.saturating_sub(tolerance),
        };
        match table.get_mut(&key) {
            Some(held) => *held = bucket,
            None => {
                table
                    .make_room(1, now_ms, |_| false)
                    .map_err(|_| FULL_WAIT_MS)?;
                table.insert(key, bucket);
            }
        }
        Ok(())
    }

    /// Buckets held now.
    pub fn len(&self) -> usize {
        self.table.lock().map(|t| t.len()).unwrap_or(0)
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(every_ms: u64, burst: u64, tickets: usize) -> PollBudget {
        PollBudget::new(PollLimits {
            every_ms,
            burst,
            tickets,
        })
    }

    /// The clock is the test's: each call names its instant.
    #[test]
    fn a_ticket_gets_its_burst_then_one_poll_per_refill() {
        let polls = budget(1_000, 20, 100);
        let ticket = (7, 42);
        for n in 0..20 {
            assert_eq!(
                polls.take_at(ticket, 5_000),
                Ok(()),
                "poll {n} of the burst"
            );
        }
        // Empty: the next poll is a refill away, and refusals take nothing.
        for _ in 0..1_000 {
            assert_eq!(polls.take_at(ticket, 5_000), Err(1_000));
        }
        assert_eq!(polls.take_at(ticket, 5_999), Err(1));
        assert_eq!(polls.take_at(ticket, 6_000), Ok(()));
        assert_eq!(polls.take_at(ticket, 6_000), Err(1_000));
        // Polling every refill goes on forever; another ticket has its own bucket.
        for second in 7..100 {
            assert_eq!(polls.take_at(ticket, second * 1_000), Ok(()));
        }
        assert_eq!(polls.take_at((7, 43), 99_000), Ok(()));
        // Left alone for the burst's refill, the bucket is full again.
        for n in 0..20 {
            assert_eq!(polls.take_at(ticket, 119_000), Ok(()), "poll {n}");
        }
        assert_eq!(polls.take_at(ticket, 119_000), Err(1_000));
    }

    #[test]
    fn a_full_table_keeps_refusing_buckets_and_refuses_newcomers() {
        let polls = budget(1_000, 2, 3);
        for user in 0..3 {
            assert_eq!(polls.take_at((1, user), 0), Ok(()));
            assert_eq!(polls.take_at((1, user), 0), Ok(()));
        }
        // Three empty buckets: no place, and none of them is evicted.
        assert_eq!(polls.take_at((1, 99), 10), Err(FULL_WAIT_MS));
        assert_eq!(polls.take_at((1, 0), 10), Err(990));
        // At 1 000 each holds a poll again (not refusing): a newcomer takes a place.
        assert_eq!(polls.take_at((1, 99), 1_000), Ok(()));
        assert_eq!(polls.len(), 3);
    }
}
