//! The flash sale: items, the purchase flow, orders, and keeping Redis honest.
//!
//! Each job is a type of its own over the shared [`SaleParts`] (the stores, the
//! in-process catalog and sold-out board, the metrics), built once at start-up:
//! [`Items`] (create, pause, the listing, the warm-up), [`Purchases`] (the flow below),
//! [`Orders`] (pay, cancel, the listings of orders), and the loops beside the server:
//! the committers' [`batches::BatchWriter`] (one per worker thread), the [`Sweeper`] (expiries and give-backs),
//! the [`Reconciler`], the [`consistency`] export and the [`sold_out`] channel. Stock
//! lives in Redis ([`stock`]), orders and items in Postgres ([`records`]).
//!
//! A purchase, in this order (cheapest refusals first):
//! 1. **item state** from the in-process [`catalog::Catalog`]: unknown, not started,
//!    ended, paused, and the [`sold_out::SoldOut`] board (no Redis call, no quota);
//!    With the item's waiting room on ([`room`]), the request's queue pass is checked
//!    next (signature, expiry, user, item; no Redis call) and a missing or bad one is
//!    refused 403 `NOT_ADMITTED`; an idempotent replay is answered before this check;
//! 2. **the limiter**: the `seckill` policy's rules in one atomic script call (fails
//!    closed: without Redis there is no stock to sell); then the [`overload`] guards,
//!    which refuse at once, before anything is reserved: the orders breaker (503
//!    `ORDERS_UNAVAILABLE` while commits keep failing) and load shedding (503
//!    `OVERLOADED` past the concurrency limit that follows the commits' latency);
//! 3. **the reservation** (`lua/reserve_stock.lua`): sale window on the Redis clock,
//!    one order per user, stock left; decrement, mark the buyer, and record the
//!    reservation as pending with a deadline, and frees the pass's slot in the room's
//!    live set (the pass is spent here and only here). With the policy's `per_item` scope it runs
//!    in the limiter's own call (one round trip for steps 2 and 3);
//! 4. **the success pipeline** (MULTI/EXEC): counter, per-user marker, order hash;
//! 5. **the commit** through this worker thread's committer (group commit, on Postgres
//!    sessions of its own): conditional decrement + order insert per item, one statement;
//! 6. **settle**: the pending record is cleared.
//!
//! When step 5 does not succeed, the reservation is undone (`lua/undo_reservation.lua`).
//! When its answer never comes, the batch is settled by its key
//! ([`records::settle`]) and its orders looked up: there is a success, not there is
//! undone, a settle that cannot finish in time is left pending (the client hears 202
//! `ORDER_PENDING`). When the process dies between 3 and
//! 6, the [`Reconciler`] finds the overdue pending record and settles or undoes it from
//! Postgres the same way. Postgres is the final guard against overselling throughout.

pub mod batches;
pub mod catalog;
pub mod committer;
pub mod consistency;
pub mod error;
mod failpoints;
pub mod item;
pub mod items;
mod leader;
pub mod orders;
pub mod overload;
pub mod parts;
pub mod purchase;
pub mod reconciler;
pub mod records;
pub mod room;
pub mod sold_out;
pub mod stock;
pub mod sweeper;

pub use error::{Outcome, Replayable, SaleError};
pub use items::{ItemChangeError, Items};
pub use orders::{OrderError, OrderLife, Orders};
pub use parts::SaleParts;
pub use purchase::{CommitOptions, Purchase, PurchaseFailure, PurchaseOptions, Purchases};
pub use reconciler::Reconciler;
pub use sweeper::Sweeper;
