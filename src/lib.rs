//! seckill: a flash-sale backend.
//!
//! Map of the crate (dependencies point down this list, never up):
//! - [`startup`]: builds the [`startup::Application`] from [`configuration::Settings`].
//! - [`routes`]: thin HTTP handlers, one file per area.
//! - [`web`]: request-side helpers (the JSON body extractor, JSON 404/405 fallbacks).
//! - [`admin`]: rules stored in Postgres and applied at runtime; live counters of all instances.
//! - [`sale`]: items, the purchase flow (reservation, pipeline, Postgres commit, repair).
//! - [`limiter`]: the rate-limiter engine (policies, Lua scripts in `lua/`, the HTTP guard).
//! - [`identity`]: bearer JWTs and the `Shopper` extractor.
//! - [`error`]: the one error type and its mapping to HTTP.
//! - [`domain`]: parsed, trusted types (`UserId`, …).
//! - [`store`]: the Postgres pool and the shared Redis connection.
//! - [`metrics`]: the Prometheus registry.
//! - [`telemetry`]: logging and tracing setup.

pub mod admin;
pub mod configuration;
pub mod domain;
pub mod error;
pub mod identity;
pub mod limiter;
pub mod metrics;
pub mod routes;
pub mod sale;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod web;
