use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The address a request is attributed to, already normalised for keying:
/// IPv4-mapped IPv6 (`::ffff:1.2.3.4`) becomes IPv4, and any other IPv6 address is
/// reduced to its /64, because one subscriber usually holds a whole /64 and could
/// otherwise rotate through 2^64 addresses to dodge a per-IP limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientIp(IpAddr);

impl ClientIp {
    /// `ip` normalised for keying (see the type's docs).
    pub fn new(ip: IpAddr) -> Self {
        let ip = match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let s = v6.segments();
                    IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
                }
            },
            v4 => v4,
        };
        Self(ip)
    }

    /// The normalised address.
    pub fn addr(self) -> IpAddr {
        self.0
    }

    /// The network around the address, for a limit on everyone in it: an IPv4 address's
    /// /24, an IPv6 client's /48 (a site's usual allocation, 65 536 /64s a client could
    /// otherwise use one after the other).
    pub fn network(self) -> Network {
        Network(match self.0 {
            IpAddr::V4(v4) => {
                let [a, b, c, _] = v4.octets();
                IpAddr::V4(Ipv4Addr::new(a, b, c, 0))
            }
            IpAddr::V6(v6) => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0))
            }
        })
    }
}

/// A [`ClientIp`]'s network; the key form is `1.2.3.0/24` or `2001:db8:1::/48`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Network(IpAddr);

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}/24"),
            IpAddr::V6(v6) => write!(f, "{v6}/48"),
        }
    }
}

/// The key form: `1.2.3.4` or `2001:db8:1:2::/64`.
impl fmt::Display for ClientIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => v4.fmt(f),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_ipv6_becomes_ipv4_and_other_ipv6_its_64() {
        let key = |s: &str| ClientIp::new(s.parse().unwrap()).to_string();
        assert_eq!(key("::ffff:10.1.2.3"), "10.1.2.3");
        assert_eq!(key("192.0.2.7"), "192.0.2.7");
        assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::/64");
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
    }

    #[test]
    fn the_network_is_an_ipv4_24_or_an_ipv6_48() {
        let net = |s: &str| ClientIp::new(s.parse().unwrap()).network().to_string();
        assert_eq!(net("192.0.2.7"), "192.0.2.0/24");
        assert_eq!(net("::ffff:10.1.2.3"), "10.1.2.0/24");
        assert_eq!(net("2001:db8:1:2:aaaa::1"), "2001:db8:1::/48");
        assert_eq!(net("2001:db8:1:ffff::1"), net("2001:db8:1:2::1"));
    }
}
