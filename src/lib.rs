//! seckill: a flash-sale backend.
//!
//! Map of the crate, by layer (a module uses only the modules of the lines below its
//! own, never one of its line or above; ARCHITECTURE.md has the rule and
//! `tests/architecture.rs` checks it):
//! - [`startup`]: builds the [`startup::Application`] from [`configuration::Settings`];
//!   [`telemetry`]: the log format and level, from the settings.
//! - [`http`]: the HTTP layer, the only one that knows actix: handlers, extractors, the
//!   one error type and its mapping to responses, the rate-limit guard; [`grpc`]: Envoy's
//!   rate-limit service over gRPC, on a runtime and a listener of its own.
//! - [`history`]: the decision stream folded into Postgres minute by minute, and what
//!   operators read from it (history, reports per sale, offenders).
//! - [`rules`]: the rate-limit policies stored in Postgres, edited and applied at runtime;
//!   [`edge`]: the limiter at the edge (envoyproxy/ratelimit's domains and descriptors);
//!   [`stats`]: live counters summed over all instances, for the dashboard; [`sale`]:
//!   items, the purchase flow, orders, the waiting room, and keeping Redis honest.
//! - [`identity`]: shopper tokens, admin tokens and the sign-in lockout.
//! - [`configuration`]: the settings (defaults, file, environment), the checks that
//!   refuse unsafe ones, and the app's rate-limit policies.
//! - [`limiter`]: the rate-limiter engine (policies, Lua scripts in `lua/`).
//! - [`store`]: the Postgres pool and `RedisStore::call`, the one way to call Redis.
//! - [`domain`]: parsed, trusted types (`UserId`, …); [`metrics`]: the Prometheus
//!   families; [`background`]: the one way to run periodic work beside the server.
//! - [`tally`]: what this instance counted, which the dashboard reads.
//! - [`vocabulary`]: the words every layer shares (outcomes, decisions, order states).

// Every public item says what it is for: denied rather than warned, so an undocumented
// one fails every build and `cargo doc`, not only `make test`'s (docs/testing.md).
#![deny(missing_docs)]

pub mod background;
pub mod configuration;
pub mod domain;
pub mod edge;
pub mod grpc;
pub mod history;
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
