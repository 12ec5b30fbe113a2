//! The limiter at the edge (issue 40): what a gateway in front of any upstream (Envoy's
//! rate-limit service API, an NGINX gate) asks the same engine. So far the domains'
//! limits as operators write them, in envoyproxy/ratelimit's format
//! ([`domain_document`]), and which limit a request's descriptor falls under
//! ([`domain_limits`]). docs/edge.md has the format's table.

pub mod domain_document;
pub mod domain_limits;

pub use domain_document::{DocumentError, DomainDocument};
pub use domain_limits::{DescriptorLimit, DomainLimits, Quota};
