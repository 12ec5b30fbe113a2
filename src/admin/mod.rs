//! What operators run the sale with: rate-limit rules stored in Postgres, edited
//! (merged, validated, version-checked, audited) and applied on every instance at
//! runtime, and live counters summed over all instances.

pub mod edit;
pub mod rules;
pub mod series;
pub mod stats;
