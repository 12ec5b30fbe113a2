//! Which address a request comes from.
//!
//! The TCP peer, unless the peer is a trusted proxy: then `X-Forwarded-For` (all its
//! header lines, in order) is read from the right, skipping trusted proxies, and the
//! first address that is not one is the client. A header from anyone else is ignored:
//! it is just text a client chose.

use std::net::IpAddr;

use actix_web::http::header::HeaderMap;
use actix_web::{web, HttpRequest};

use super::api_error::ApiError;
use crate::domain::{ClientId, ClientIp};

/// Proxies whose `X-Forwarded-For` we believe (default: loopback only).
#[derive(Debug, Clone)]
pub struct TrustedProxies(Vec<IpAddr>);

impl TrustedProxies {
    /// The proxies at `addrs` (IPv4-mapped IPv6 read as IPv4).
    pub fn new(addrs: Vec<IpAddr>) -> Self {
        Self(addrs.into_iter().map(canonical).collect())
    }

    fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&canonical(ip))
    }

    /// Whether the request comes straight from a trusted proxy, whose identity headers
    /// (`X-Forwarded-For`, `X-Client-Id`) we believe.
    pub fn is_trusted_peer(&self, req: &HttpRequest) -> bool {
        req.peer_addr().is_some_and(|peer| self.contains(peer.ip()))
    }

    /// The client's address (see the module docs); `None` when the peer is unknown.
    pub fn client_ip(&self, req: &HttpRequest) -> Option<ClientIp> {
        let peer = req.peer_addr()?.ip();
        Some(ClientIp::new(self.resolve(peer, req.headers())))
    }

    fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.contains(peer) {
            return peer;
        }
        // Split the raw bytes: a proxy appends its hop to the client's own line, and a
        // byte there that is not visible ASCII (which a header may carry) must spoil only
        // the client's hops, not the whole line with the address the proxy vouched for.
        let hops: Vec<&[u8]> = headers
            .get_all("x-forwarded-for")
            .flat_map(|v| v.as_bytes().split(|&b| b == b','))
            .collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            // An unparsable hop was written by someone we do not trust: stop at the last
            // address a trusted proxy vouched for.
            let parsed = std::str::from_utf8(hop).map(|hop| hop.trim().parse::<IpAddr>());
            let Ok(Ok(ip)) = parsed else { break };
            client = ip;
            if !self.contains(ip) {
                break;
            }
        }
        client
    }
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// The header a client names itself in, believed only from a trusted proxy.
pub const CLIENT_ID_HEADER: &str = "x-client-id";

/// The caller's IP, as far as we believe forwarded headers (see [`TrustedProxies`]).
pub fn client_ip(req: &HttpRequest) -> Result<ClientIp, ApiError> {
    let proxies = req
        .app_data::<web::Data<TrustedProxies>>()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("TrustedProxies are not registered")))?;
    proxies
        .client_ip(req)
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("request without a peer address")))
}

/// The caller's `X-Client-Id`, if any, believed only from a trusted proxy (the same
/// list as `X-Forwarded-For`): from anyone else it is text the client chose, and a fresh
/// id per request would buy a fresh quota (and a Redis key) each time, so the caller is
/// keyed by address instead. From a trusted proxy an invalid one is a 400, not a silent
/// fallback to the IP: the caller meant to be someone.
pub fn client_id(req: &HttpRequest) -> Result<Option<ClientId>, ApiError> {
    let Some(value) = req.headers().get(CLIENT_ID_HEADER) else {
        return Ok(None);
    };
    let trusted = req
        .app_data::<web::Data<TrustedProxies>>()
        .is_some_and(|proxies| proxies.is_trusted_peer(req));
    if !trusted {
        return Ok(None);
    }
    let raw = value.to_str().unwrap_or("\u{0}");
    ClientId::parse(raw)
        .map(Some)
        .map_err(|e| ApiError::validation("X-Client-Id", e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue};

    fn resolve(peer: &str, xff: &[&str]) -> String {
        let proxies =
            TrustedProxies::new(vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]);
        let mut headers = HeaderMap::new();
        for line in xff {
            headers.append(
                HeaderName::from_static("x-forwarded-for"),
                HeaderValue::from_str(line).unwrap(),
            );
        }
        proxies.resolve(peer.parse().unwrap(), &headers).to_string()
    }

    #[test]
    fn forwarded_for_counts_only_from_a_trusted_peer() {
        assert_eq!(resolve("10.0.0.9", &["1.2.3.4"]), "10.0.0.9");
        assert_eq!(resolve("127.0.0.1", &["1.2.3.4"]), "1.2.3.4");
        assert_eq!(resolve("::ffff:127.0.0.1", &["1.2.3.4"]), "1.2.3.4");
        assert_eq!(resolve("127.0.0.1", &[]), "127.0.0.1");
    }

    #[test]
    fn the_rightmost_untrusted_hop_wins_across_header_lines() {
        // A client can prepend anything; only what our proxies appended is believed.
        assert_eq!(resolve("127.0.0.1", &["6.6.6.6, 1.2.3.4"]), "1.2.3.4");
        assert_eq!(
            resolve("127.0.0.1", &["6.6.6.6", "1.2.3.4, 127.0.0.1"]),
            "1.2.3.4"
        );
        assert_eq!(resolve("127.0.0.1", &["1.2.3.4, garbage"]), "127.0.0.1");
        assert_eq!(resolve("127.0.0.1", &["127.0.0.1, ::1"]), "127.0.0.1");
    }

    #[test]
    fn bytes_a_client_wrote_that_are_not_ascii_do_not_hide_the_proxys_hop() {
        // Was 127.0.0.1: the line was skipped whole, so the client was keyed as the proxy.
        assert_eq!(resolve("127.0.0.1", &["gr\u{fc}n, 1.2.3.4"]), "1.2.3.4");
        assert_eq!(resolve("127.0.0.1", &["1.2.3.4, gr\u{fc}n"]), "127.0.0.1");
    }
}
