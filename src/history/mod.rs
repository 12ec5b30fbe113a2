//! The sale's memory: the decision stream that every instance's stats flush appends to
//! (`crate::stats::record`), folded into per-minute rows in Postgres, and what operators
//! read from them after a sale (docs/history.md).

pub mod fold;
mod minute_rows;
pub mod report;
pub mod retention;
pub mod rows;

pub use fold::Fold;
pub use retention::Retention;
