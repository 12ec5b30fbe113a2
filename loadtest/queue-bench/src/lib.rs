//! The waiting room's bench (`queue` binary; `scripts/bench/scenarios-queue.sh` runs it
//! in `make bench`, docs/waiting-room.md has the figures), over `loadtest_core`'s
//! client, ledger, setup and store checks. Each scenario runs against
//! instances the script started, creates its own item and room, and ends by itself:
//! - [`fairness`]: a crowd with bot operators, through the room and straight at the
//!   sale: the units each operator bought;
//! - [`fifo`]: a fifo room, joiners arriving over time: positions and admissions in
//!   the order of joining, from what the clients saw;
//! - [`poll_cost`]: polls against the sold-out path, and Redis calls per poll;
//! - [`inlet`]: admissions per second against `admitPerSecond`, live passes against
//!   `maxActive`;
//! - [`exactness`]: two instances, one SIGKILLed mid-queue: no place admitted twice,
//!   the survivor keeps admitting, units sold = orders, one pass per order.
//!
//! Shared parts, one job each: [`site`] (the instances, the admin API, metrics),
//! [`crowd`] (accounts and who holds them, the dice), [`shopper`] (one shopper's
//! requests), [`seen`] (what the clients saw), [`behaviour`] (how humans and bots act),
//! [`figures`] (checks and the report's shape, [`ScenarioReport`]).

use std::time::Instant;

pub(crate) mod behaviour;
pub(crate) mod crowd;
pub mod exactness;
pub mod fairness;
pub mod fifo;
pub mod figures;
pub mod inlet;
pub mod poll_cost;
pub(crate) mod seen;
pub(crate) mod shopper;
pub mod site;

pub use figures::{Lines, ScenarioReport};
pub use site::Site;

/// Seconds from `start` to `at`, negative before it.
pub(crate) fn seconds_after(start: Instant, at: Instant) -> f64 {
    at.saturating_duration_since(start).as_secs_f64()
        - start.saturating_duration_since(at).as_secs_f64()
}
