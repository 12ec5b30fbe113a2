//! How the load talks HTTP: the client every request goes through, the address a client
//! index is sent as, and why a request got no answer.

use std::time::Duration;

/// The client of a run: one pool of connections for every request.
pub(crate) fn client() -> reqwest::Result<reqwest::Client> {
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
pub(crate) fn ip_of(index: u32) -> String {
    format!(
        "10.{}.{}.{}",
        100 + (index >> 16) % 100,
        (index >> 8) & 0xff,
        index & 0xff
    )
}

/// Why a request got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
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
    pub(crate) fn of(error: &reqwest::Error) -> Self {
        if error.is_connect() {
            Self::Connect
        } else if error.is_timeout() {
            Self::Timeout
        } else {
            Self::Lost
        }
    }

    /// A failure while reading an answer already begun cannot be a connect failure.
    pub(crate) fn or_lost(self) -> Self {
        if self == Self::Connect {
            Self::Lost
        } else {
            self
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Lost => "connection lost",
            Self::Timeout => "timeout",
        }
    }
}
