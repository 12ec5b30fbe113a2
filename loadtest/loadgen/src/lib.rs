//! loadgen: drives `POST /seckill` at one or more seckill instances and then proves,
//! from its own ledger and from the stores, that the limits and the stock held. The
//! client, the ledger, the report's pieces, the setup and the store checks are
//! `loadtest_core`'s, shared with the other load tools (`loadtest/README.md`).
//!
//! Map of the crate, in the order a run uses it:
//! - `config`: what a run is asked to do ([`Config`], [`Options`], the [`Limits`] given).
//! - `policies`: the policies the service runs, read through its admin API; `limits`:
//!   the limits the checks hold the purchases to, those not given read from there.
//! - `request`: one request, sent and written to the ledger.
//! - `schedule`: the load, in the open model (a rate) or the closed one (a concurrency).
//! - `room`: room mode, the item's waiting room on and shoppers (`shopper`) who join it,
//!   poll it and buy with their pass, beside the load's purchases without one; its own
//!   checks and report.
//! - `side`: beside the purchases, a few keys of the policies that limit in process
//!   while Redis is away; `samples`: the targets' metrics over the run.
//! - `progress`: the line on stderr while the load runs.
//! - `report`: the figures of the ledger ([`RunReport`]); `phases` cuts them along named
//!   windows.
//! - `limit_checks`: the limits, proven from the ledger alone; `fallback_checks`: the
//!   side load's, around the Redis outages a fault injector wrote down (`outages`).
//! - `run`: [`run`] and [`run_with`], all of the above in order, with the store checks
//!   of `loadtest_core::stores`.

mod config;
mod fallback_checks;
mod limit_checks;
mod limits;
mod outages;
mod phases;
mod policies;
mod progress;
mod report;
mod request;
mod room;
mod run;
mod samples;
mod schedule;
mod shopper;
mod side;

pub use config::{
    Config, ItemChoice, Limit, LimitParts, Limits, Load, Options, RoomPlan, SideLoad, Stores,
};
pub use loadtest_core::report::{Answers, Check, Latency, Span};
pub use report::{Phase, RunReport, SaleTotals};
pub use run::{run, run_with};
pub use samples::Sample;
pub use shopper::RoomReport;
