//! What the load tools share (`loadgen`, the waiting room's `queue` bench, `slowloris`,
//! the algorithm `trace`): each tool is a crate of its own beside this one, and this one
//! imports none of them.
//!
//! - [`client`]: the HTTP client, the address a client index is sent as, why no answer
//!   came, loopback-only targets.
//! - [`ledger`]: what happened to each request ([`ledger::Record`]).
//! - [`report`]: the pieces of a report: latency, answers grouped by what came back,
//!   a [`report::Check`] with its verdict.
//! - [`setup`]: before the load: an item created and listed everywhere, dev-login tokens.
//! - [`room`]: the waiting room from a shopper's side: the room turned on, the join,
//!   the polls and the purchase with the pass.
//! - [`stores`]: after the load: the stock and the orders, proven against Postgres and
//!   Redis.
//! - [`dice`]: a small seeded generator, so one seed makes the same run.

pub mod client;
pub mod dice;
pub mod ledger;
pub mod report;
pub mod room;
pub mod setup;
pub mod stores;
