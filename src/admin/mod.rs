//! What operators run the sale with: rate-limit rules stored in Postgres and applied on
//! every instance at runtime, and live counters summed over all instances.

pub mod rules;
pub mod stats;
