//! The HTTP layer: everything that knows about actix lives here (plus `main.rs` and
//! `src/startup/`, which build the server).
//!
//! Handlers in [`routes`] parse input into domain types with the extractors of this
//! module ([`json::JsonBody`], [`auth::Shopper`], [`forwarded::client_ip`]), call the domain, and
//! turn its answer into a response; [`api_error::ApiError`] is the one error type and its
//! mapping to HTTP. [`idempotency`] answers a retried `Idempotency-Key` from the first
//! attempt's answer; it keeps responses, which is why it is here and not in the sale.
//! [`gate`] is the NGINX gate's decision endpoint, on a listener of its own.
//! Nothing below this layer (sale, limiter, identity, admin, stores) imports actix.

pub mod api_error;
pub mod auth;
pub mod connections;
pub mod fallback;
pub mod forwarded;
pub mod gate;
pub mod head_budget;
pub mod idempotency;
pub mod json;
pub mod openapi;
pub mod query_params;
pub mod rate_limit;
pub mod rate_limit_headers;
pub mod request_metrics;
pub mod request_span;
pub mod routes;

pub use api_error::ApiError;
pub use json::JsonBody;
pub use query_params::QueryParams;
