//! How the tools talk HTTP: the client every request goes through, the address a client
//! index is sent as, why a request got no answer, and the loopback-only targets.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;

/// The client of a run: one pool of connections for every request.
pub fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .pool_max_idle_per_host(4096)
        // Shorter than the server's keep-alive (actix: 5 s): a connection the server
        // closes as idle just as a request goes out loses that request's answer, which
        // would count as an unknown outcome of a healthy run.
        .pool_idle_timeout(Duration::from_secs(3))
        .tcp_nodelay(true)
        .build()
}

/// The `X-Forwarded-For` address of client `index`.
pub fn ip_of(index: u32) -> String {
    format!(
        "10.{}.{}.{}",
        100 + (index >> 16) % 100,
        (index >> 8) & 0xff,
        index & 0xff
    )
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No connection could be made (refused, or the connect timed out): the request was
    /// never sent, so it certainly did nothing.
    Connect,
    /// Sent, but the connection broke before a whole answer came back: the outcome is
    /// unknown.
    Lost,
    /// Sent, and no answer within the client's timeout: the outcome is unknown.
    Timeout,
}

impl Failure {
    pub fn of(error: &reqwest::Error) -> Self {
        if error.is_connect() {
            Self::Connect
        } else if error.is_timeout() {
            Self::Timeout
        } else {
            Self::Lost
        }
    }

    /// A failure while reading an answer already begun cannot be a connect failure.
    pub fn or_lost(self) -> Self {
        if self == Self::Connect {
            Self::Lost
        } else {
            self
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Lost => "connection lost",
            Self::Timeout => "timeout",
        }
    }
}

/// `http://HOST:PORT[/...]` as a socket address; only a loopback IP literal is accepted,
/// so a tool cannot be pointed anywhere else.
pub fn loopback(url: &str) -> anyhow::Result<SocketAddr> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url}: only http:// URLs"))?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let address: SocketAddr = authority
        .parse()
        .with_context(|| format!("{url}: HOST:PORT with HOST an IP address"))?;
    anyhow::ensure!(address.ip().is_loopback(), "{url}: loopback addresses only");
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::loopback;

    #[test]
    fn only_loopback_targets_are_accepted() {
        assert_eq!(
            loopback("http://127.0.0.1:8080/").unwrap().to_string(),
            "127.0.0.1:8080"
        );
        assert!(loopback("http://[::1]:8080").is_ok());
        assert!(loopback("http://10.0.0.1:8080").is_err());
        assert!(
            loopback("http://localhost:8080").is_err(),
            "an IP literal only"
        );
        assert!(loopback("https://127.0.0.1:8080").is_err());
    }
}
