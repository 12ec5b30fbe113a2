//! loadgen: drives `POST /seckill` at one or more seckill instances and then proves,
//! from its own ledger and from the stores, that the limits and the stock held.
//!
//! Map of the crate, in the order a run uses it:
//! - `config`: what a run is asked to do ([`Config`], [`Options`], the [`Limits`]).
//! - `setup`: before the load: the item created and listed everywhere, the tokens.
//! - `client`: the HTTP client, the address a client is sent as, why no answer came.
//! - `request`: one request, sent and written to the ledger.
//! - `schedule`: the load, in the open model (a rate) or the closed one (a concurrency).
//! - `side`: beside the purchases, a few keys of the policies that limit in process
//!   while Redis is away; `samples`: the targets' metrics over the run.
//! - `progress`: the line on stderr while the load runs.
//! - `ledger`: what happened to each request.
//! - `report`: the figures of the ledger ([`Report`]); `phases` cuts them along named
//!   windows.
//! - `limit_checks`: the limits, proven from the ledger alone; `fallback_checks`: the
//!   side load's, around the Redis outages a fault injector wrote down (`outages`).
//! - `stores`: the stock and the orders, proven against Postgres and Redis.
//! - `run`: [`run`] and [`run_with`], all of the above in order.
//! - [`slowloris`]: a tool of its own (`src/bin/slowloris.rs`) that borrows `setup`,
//!   `client` and `report`.
//! - [`queue`]: the waiting room's bench (`src/bin/queue.rs`), which borrows `setup`,
//!   `client`, `ledger`, `report` and `stores`.
//! - [`trace`]: the limiting algorithms on one trace (`src/bin/trace.rs`), straight
//!   against Redis; borrows only the queue's dice.

mod client;
mod config;
mod fallback_checks;
mod ledger;
mod limit_checks;
mod outages;
mod phases;
mod progress;
pub mod queue;
mod report;
mod request;
mod run;
mod samples;
mod schedule;
mod setup;
mod side;
pub mod slowloris;
mod stores;
pub mod trace;

pub use config::{Config, ItemChoice, Limit, Limits, Load, Options, SideLoad, Stores};
pub use report::{Answers, Check, Latency, Phase, Report, Span};
pub use run::{run, run_with};
pub use samples::Sample;
