//! The limiter at the edge (issue 40): what a gateway in front of any upstream (Envoy's
//! rate-limit service API, an NGINX gate) asks the same engine. So far the domains'
//! limits as operators write them, in envoyproxy/ratelimit's format
//! ([`domain_document`]), and which limit a request's descriptor falls under
//! ([`domain_limits`]); the domains stored in Postgres, seeded from their YAML files
//! ([`domain_files`]), edited live and reloaded on every instance ([`domain_store`]);
//! what a gateway's request is answered ([`decision`]); and the bound on the distinct
//! keys a domain counts under ([`key_registry`]).
//! docs/edge.md has the format's table.

pub mod decision;
pub mod domain_document;
pub mod domain_files;
pub mod domain_limits;
pub mod domain_store;
pub mod key_registry;

pub use decision::{
    Code, CurrentLimit, Descriptor, DescriptorStatus, Edge, EdgeInputError, EdgeRequest,
    EdgeVerdict, Entry,
};
pub use domain_document::{DocumentError, DomainDocument};
pub use domain_limits::{DescriptorLimit, DomainLimits, Quota};
pub use domain_store::{DomainChangeError, DomainStore, LoadedDomain, StoredDomain};
