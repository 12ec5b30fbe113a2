//! seckill: a flash-sale backend.
//!
//! Map of the crate (dependencies point down this list, never up; ARCHITECTURE.md has
//! the rule and how `make test` checks it):
//! - [`startup`]: builds the [`startup::Application`] from [`configuration::Settings`].
//! - [`configuration`]: the settings (defaults, file, environment), the checks that
//!   refuse unsafe ones, and the app's rate-limit policies.
//! - [`http`]: the HTTP layer, the only one that knows actix: handlers, extractors, the
//!   one error type and its mapping to responses, the rate-limit guard.
//! - [`admin`]: rules stored in Postgres and applied at runtime; live counters of all instances.
//! - [`sale`]: items, the purchase flow (reservation, pipeline, Postgres commit, repair).
//! - [`identity`]: shopper tokens, admin tokens and the sign-in lockout.
//! - [`limiter`]: the rate-limiter engine (policies, Lua scripts in `lua/`).
//! - [`domain`]: parsed, trusted types (`UserId`, …).
//! - [`store`]: the Postgres pool and the shared Redis connection.
//! - [`metrics`]: the Prometheus registry.
//! - [`background`]: the one way to run periodic work beside the server.
//! - [`telemetry`]: the log format and level, from the settings.

pub mod admin;
pub mod background;
pub mod configuration;
pub mod domain;
pub mod http;
pub mod identity;
pub mod limiter;
pub mod metrics;
pub mod sale;
pub mod startup;
pub mod store;
pub mod telemetry;
