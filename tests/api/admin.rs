//! The operators' API, a module per job: rate-limit policies edited at runtime on every
//! instance (`policy_edits`) without an edit lost (`policy_versions`); pausing a sale;
//! the orders' search; live counters over all instances; the admin token and its
//! sign-in lockout (`sign_in`).

mod live_counters;
mod orders;
mod pause;
mod policy_edits;
mod policy_versions;
mod sign_in;
