//! The sale's memory: the decision stream that every instance's stats flush appends to
//! (`crate::stats::record`), folded into per-minute rows in Postgres, and what operators
//! read from them after a sale (docs/history.md).
//!
//! - [`offenders`]: the top users and addresses of a window, merged from the instances'
//!   per-minute heavy hitters; [`classify`]: the label each rule gives them.
//! - [`blocks`]: the operator's blocks, stored, audited, and in force on every instance
//!   from the change's answer on (`limiter::blocklist` holds them in process);
//!   [`block_rules`]: what a block may name and what a change answers.

pub mod block_rules;
pub mod blocks;
pub mod classify;
pub mod fold;
mod minute_rows;
pub mod offenders;
pub mod report;
pub mod retention;
pub mod rows;
pub mod samples;

pub use fold::Fold;
pub use retention::Retention;
