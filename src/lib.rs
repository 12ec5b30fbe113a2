//! seckill: a flash-sale backend.
//!
//! Map of the crate (dependencies point down this list, never up; ARCHITECTURE.md has
//! the rule and how `make test` checks it):
//! - [`startup`]: builds the [`startup::Application`] from [`configuration::Settings`].
//! - [`configuration`]: the settings (defaults, file, environment), the checks that
//!   refuse unsafe ones, and the app's rate-limit policies.
//! - [`http`]: the HTTP layer, the only one that knows actix: handlers, extractors, the
//!   one error type and its mapping to responses, the rate-limit guard.
//! - [`rules`]: the rate-limit policies stored in Postgres, edited and applied at runtime.
//! - [`stats`]: live counters summed over all instances, for the dashboard.
//! - [`sale`]: items, the purchase flow, orders, and keeping Redis honest.
//! - [`identity`]: shopper tokens, admin tokens and the sign-in lockout.
//! - [`limiter`]: the rate-limiter engine (policies, Lua scripts in `lua/`).
//! - [`domain`]: parsed, trusted types (`UserId`, …).
//! - [`store`]: the Postgres pool and the shared Redis connection.
//! - [`metrics`]: the Prometheus registry, and the [`tally`] the dashboard reads.
//! - [`background`]: the one way to run periodic work beside the server.
//! - [`telemetry`]: the log format and level, from the settings.
//! - [`vocabulary`]: the words every layer shares (outcomes, decisions, order states).

pub mod background;
pub mod configuration;
pub mod domain;
pub mod http;
pub mod identity;
pub mod limiter;
pub mod metrics;
pub mod rules;
pub mod sale;
pub mod startup;
pub mod stats;
pub mod store;
pub mod tally;
pub mod telemetry;
pub mod vocabulary;
