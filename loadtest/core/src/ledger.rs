//! The ledger: what happened to each request, with its send and receive instants. The
//! report and every check after the load are computed from it.
//!
//! "Admitted by the limiter" means an answer that is not a 429 and carries
//! `X-RateLimit-Remaining`; answers given before the limiter (bad input, unknown item,
//! the sold-out fast path) carry no such header and do not count.

use std::time::Duration;

use crate::client::Failure;

/// What happened to one request.
#[derive(Debug, Clone)]
pub struct Record {
    /// The instance it went to: an index into the run's targets.
    pub target: usize,
    pub user: i64,
    pub ip: u32,
    pub sent: Duration,
    pub received: Duration,
    /// 0 when no answer came back (see `failure`).
    pub status: u16,
    pub code: Option<String>,
    pub dimension: Option<String>,
    pub admitted: bool,
    /// Why no answer came back, when none did.
    pub failure: Option<Failure>,
    /// The order a 200 answer names.
    pub order_id: Option<String>,
}

impl Record {
    /// Whether the limiter may have admitted this request: it answered so, or the
    /// request reached an instance and its answer was lost (the instance died, the
    /// connection was reset, the client gave up waiting).
    pub fn possibly_admitted(&self) -> bool {
        self.admitted || matches!(self.failure, Some(Failure::Lost | Failure::Timeout))
    }

    /// The key of `Answers` (`report::answers`): the status and the body's code (`503 OVERLOADED`,
    /// `200`), or why no answer came (`error timeout`).
    pub fn answer(&self) -> String {
        match (self.status, self.failure, self.code.as_deref()) {
            (0, Some(failure), _) => format!("error {}", failure.as_str()),
            (0, None, _) => "error".to_string(),
            (status, _, Some(code)) => format!("{status} {code}"),
            (status, _, None) => status.to_string(),
        }
    }

    /// The key of `report::by_cause`: a 5xx with its code, or why no answer came.
    pub fn cause(&self) -> Option<String> {
        match (self.status, self.failure) {
            (0, Some(failure)) => Some(format!("error {}", failure.as_str())),
            (500.., _) => Some(format!(
                "{} {}",
                self.status,
                self.code.as_deref().unwrap_or("-")
            )),
            _ => None,
        }
    }
}
