//! Envoy's rate-limit service (`envoy.service.ratelimit.v3.RateLimitService`), served to
//! a gateway over gRPC: [`rate_limit_service`] turns a `RateLimitRequest` into an
//! [`EdgeRequest`](crate::edge::EdgeRequest), asks the edge's engine and turns its
//! verdict into a `RateLimitResponse`; [`rls_server`] runs it on a tokio runtime and a
//! listener of its own (`rls_port`), so a flood of gateway calls never takes the
//! HTTP service's workers, and stops it with the application. docs/edge.md, "The gRPC
//! server", has the mapping and the bounds.

pub mod rate_limit_service;
pub mod rls_server;

pub use rate_limit_service::RateLimitGrpc;
pub use rls_server::RlsServer;
