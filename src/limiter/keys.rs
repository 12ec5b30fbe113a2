//! Redis keys of the limiter.
//!
//! `<prefix>:{<policy>}:<algorithm>:<rule>:<value>`, for example
//! `seckill:{seckill}:sliding_window:user:42`.
//!
//! - The `{<policy>}` hash tag puts every key of a policy in one Redis Cluster slot, so
//!   one script can touch all of them. The consequence: all keys of one policy live on
//!   one shard, and a policy's load cannot be spread across shards.
//! - The algorithm is part of the key, so switching a policy's algorithm never meets a
//!   key of the other type (a sorted set where a hash is expected), and each algorithm
//!   keeps its own quota.
//! - A rule's limits are not part of the key: an edit keeps every caller's state (the
//!   scripts convert it) instead of handing everyone a fresh quota.
//! - Every part is bounded and from a known alphabet: names are checked when policies
//!   load, client ids when parsed, IPs and user ids are printed by us.

use std::borrow::Cow;
use std::fmt::Write;

use super::policy::{Algorithm, KeySource, Rule};
use super::Rejection;
use crate::domain::{ClientId, ClientIp, UserId};

/// Who is asking, as far as the limiter cares.
#[derive(Debug, Clone)]
pub struct Caller<'a> {
    pub user: Option<UserId>,
    pub ip: ClientIp,
    pub client_id: Option<&'a ClientId>,
    /// The matched route pattern (ours, never the raw path).
    pub route: Cow<'a, str>,
}

pub fn redis_key(
    prefix: &str,
    policy: &str,
    algorithm: Algorithm,
    rule: &Rule,
    caller: &Caller<'_>,
) -> Result<String, Rejection> {
    let mut key = String::with_capacity(prefix.len() + policy.len() + rule.name.len() + 48);
    // Writing to a String cannot fail.
    let _ = write!(key, "{prefix}:{{{policy}}}:{algorithm}:{}:", rule.name);
    let _ = match &rule.key {
        KeySource::Literal(value) => write!(key, "{value}"),
        KeySource::User => write!(key, "{}", caller.user.ok_or(Rejection::NeedsUser)?),
        KeySource::Ip => write!(key, "{}", caller.ip),
        KeySource::ClientId => match caller.client_id {
            Some(id) => write!(key, "id:{id}"),
            // Prefixed so a client id can never pose as someone's IP.
            None => write!(key, "ip:{}", caller.ip),
        },
        KeySource::Route => write!(key, "{}", caller.route),
    };
    Ok(key)
}
