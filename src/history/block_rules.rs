//! What a block is, as the operator's request names it and as it is stored: its target
//! (a user, or an address as the limiter keys it), its bounds, and what a change answers
//! (`super::blocks` stores and spreads them).

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::domain::{ClientIp, UserId};

/// The longest reason kept, in characters.
pub const REASON_MAX_CHARS: usize = 200;

/// What a block names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A shopper.
    User(UserId),
    /// An address as the limiter keys it.
    Ip(ClientIp),
}

impl Target {
    /// `kind` (`user` or `ip`) and `value` as the limiter keys them, or what is wrong
    /// (the field and why). An address may be given whole or as its key (`…::/64`);
    /// loopback and `guarded` (the trusted proxies) are refused.
    pub fn parse(kind: &str, value: &str, guarded: &[IpAddr]) -> Result<Self, Invalid> {
        match kind {
            "user" => value
                .parse::<UserId>()
                .map(Self::User)
                .map_err(|e| Invalid::new("value", format!("a user block's value: {e}"))),
            "ip" => {
                // An address, or an IPv6 address's key form (`…::/64`).
                let addr: IpAddr = value
                    .parse()
                    .ok()
                    .or_else(|| {
                        let bare = value.strip_suffix("/64")?;
                        bare.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
                    })
                    .ok_or_else(|| {
                        Invalid::new("value", "an ip block's value is an IPv4 or IPv6 address")
                    })?;
                let ip = ClientIp::new(addr);
                let loopback = addr.is_loopback() || ip.addr().is_loopback();
                let local = ClientIp::new(IpAddr::from(std::net::Ipv6Addr::LOCALHOST));
                if loopback || ip == local {
                    return Err(Invalid::new(
                        "value",
                        "a loopback address cannot be blocked",
                    ));
                }
                if guarded.iter().any(|proxy| ClientIp::new(*proxy) == ip) {
                    return Err(Invalid::new(
                        "value",
                        "a trusted proxy cannot be blocked (SECKILL_TRUSTED_PROXIES): every request through it would be",
                    ));
                }
                Ok(Self::Ip(ip))
            }
            _ => Err(Invalid::new("kind", "kind is user or ip")),
        }
    }

    /// The stored kind.
    pub fn kind(self) -> &'static str {
        match self {
            Self::User(_) => "user",
            Self::Ip(_) => "ip",
        }
    }

    /// The stored value: the limiter's key form.
    pub fn value(self) -> String {
        match self {
            Self::User(user) => user.to_string(),
            Self::Ip(ip) => ip.to_string(),
        }
    }

    /// A stored row's target (what [`Self::value`] wrote).
    pub(super) fn stored(kind: &str, value: &str) -> Option<Self> {
        Self::parse(kind, value, &[]).ok()
    }
}

/// A refused change: the field at fault and why (400 `VALIDATION_FAILED`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    /// The body's field.
    pub field: &'static str,
    /// Why.
    pub message: String,
}

impl Invalid {
    pub(super) fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum BlockError {
    /// Bad input, or the list is full.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    /// An unblock of something not blocked.
    #[error("no such block")]
    NotFound,
    /// Postgres failed.
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

impl From<sqlx::Error> for BlockError {
    fn from(e: sqlx::Error) -> Self {
        Self::Store(e.into())
    }
}

/// A block as an operator asks for it, parsed.
#[derive(Debug, Clone)]
pub struct NewBlock {
    /// Whom.
    pub target: Target,
    /// For how long, in seconds (1 to `history.block_max_secs`).
    pub seconds: i64,
    /// Why, for the audit and the list.
    pub reason: String,
}

/// A block in force.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Block {
    /// `user` or `ip`.
    pub kind: String,
    /// The user id, or the address as the limiter keys it.
    pub value: String,
    /// When it lifts.
    pub until: DateTime<Utc>,
    /// Why.
    pub reason: String,
    /// The admin token's name that set it.
    pub created_by: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

/// One change of the blocks.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockAudit {
    /// The change's id: the blocks' version it made.
    pub id: i64,
    /// `user` or `ip`.
    pub kind: String,
    /// The value as stored.
    pub value: String,
    /// `block` or `unblock`.
    pub action: String,
    /// A block's length.
    pub seconds: Option<i64>,
    /// A block's reason.
    pub reason: String,
    /// The admin token's name.
    pub changed_by: String,
    /// When.
    pub changed_at: DateTime<Utc>,
}

/// What a change answers: its version and the live instances that had not applied it
/// when the answer was sent (empty: in force everywhere).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    /// The blocks' version the change made.
    pub version: i64,
    /// Instances (heartbeat tags) that had not confirmed it within the deadline; also
    /// `["unknown"]` when Redis could not be asked who is alive.
    pub unconfirmed: Vec<String>,
}

/// The blocks' bounds (`history.block_max_secs`, `history.blocks_max`) and who may not
/// be blocked (`trusted_proxies`).
#[derive(Debug, Clone)]
pub struct BlockLimits {
    /// The longest block, in seconds.
    pub max_secs: u64,
    /// The most blocks in force at once.
    pub max_blocks: usize,
    /// Addresses never blocked: the trusted proxies.
    pub guarded: Vec<IpAddr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_normalised_as_the_limiter_keys_them() {
        let parse = |kind, value| Target::parse(kind, value, &[]).map(|t| (t.kind(), t.value()));
        assert_eq!(parse("user", "42"), Ok(("user", "42".into())));
        assert_eq!(
            parse("ip", "2001:db8:1:2::9"),
            Ok(("ip", "2001:db8:1:2::/64".into()))
        );
        assert_eq!(
            parse("ip", "2001:db8:1:2::/64"),
            Ok(("ip", "2001:db8:1:2::/64".into()))
        );
        assert_eq!(
            parse("ip", "::ffff:192.0.2.7"),
            Ok(("ip", "192.0.2.7".into()))
        );
        for (kind, value, field) in [
            ("user", "042", "value"),
            ("user", "0", "value"),
            ("ip", "192.0.2.300", "value"),
            ("ip", "192.0.2.3/64", "value"),
            ("ip", "127.0.0.1", "value"),
            ("ip", "::1", "value"),
            ("ip", "::5", "value"),
            ("device", "1", "kind"),
        ] {
            assert_eq!(
                parse(kind, value).map_err(|e| e.field),
                Err(field),
                "{kind} {value}"
            );
        }
    }

    #[test]
    fn a_trusted_proxy_and_its_64_cannot_be_blocked() {
        let proxies = ["10.0.0.5".parse().unwrap(), "2001:db8::1".parse().unwrap()];
        assert!(Target::parse("ip", "10.0.0.5", &proxies).is_err());
        assert!(Target::parse("ip", "2001:db8::77", &proxies).is_err());
        assert!(Target::parse("ip", "10.0.0.6", &proxies).is_ok());
    }
}
