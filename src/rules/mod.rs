//! The rate-limit rules as operators run them: the policies stored in Postgres (seeded
//! from the settings on a fresh install, then the truth), edited at runtime (merged,
//! validated, version-checked, audited: [`edit`]) and applied on every instance within
//! about half a second ([`rule_store`]).

pub mod edit;
pub mod rule_store;

pub use edit::{PolicyEdit, RuleChangeError};
pub use rule_store::{watch, AuditEntry, RuleStore, StoredPolicy};
