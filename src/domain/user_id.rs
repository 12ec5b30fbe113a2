use std::fmt;
use std::str::FromStr;

use serde::Serialize;

/// A shopper's id: a positive integer (Postgres `BIGINT`). Holding one proves it was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct UserId(i64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a user id is a positive integer")]
pub struct InvalidUserId;

impl UserId {
    /// The id as stored and as tokens carry it (`sub`).
    pub fn get(self) -> i64 {
        self.0
    }
}

impl TryFrom<i64> for UserId {
    type Error = InvalidUserId;

    fn try_from(value: i64) -> Result<Self, Self::Error> {
        if value > 0 {
            Ok(Self(value))
        } else {
            Err(InvalidUserId)
        }
    }
}

/// Parses the decimal form carried in a token's `sub`: digits only, no sign, no padding.
impl FromStr for UserId {
    type Err = InvalidUserId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.starts_with('0') {
            return Err(InvalidUserId);
        }
        s.parse::<i64>()
            .map_err(|_| InvalidUserId)
            .and_then(Self::try_from)
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_positive_decimals_parse() {
        assert_eq!("42".parse::<UserId>().map(UserId::get), Ok(42));
        for bad in [
            "",
            "0",
            "-1",
            "+1",
            "042",
            "1.0",
            " 1",
            "99999999999999999999",
        ] {
            assert_eq!(bad.parse::<UserId>(), Err(InvalidUserId), "{bad:?}");
        }
        assert_eq!(UserId::try_from(0), Err(InvalidUserId));
    }
}
