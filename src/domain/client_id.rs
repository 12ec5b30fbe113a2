use std::fmt;

/// A caller-chosen id from `X-Client-Id`: 1 to 64 characters of `[A-Za-z0-9._:-]`.
/// It becomes part of a Redis key, so anything longer or stranger is refused, not
/// trimmed: a silently altered id would share a quota with someone else.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientId(String);

pub const CLIENT_ID_MAX_LEN: usize = 64;

/// A refused `X-Client-Id`: 400 `VALIDATION_FAILED`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("X-Client-Id must be 1 to 64 characters of A-Z a-z 0-9 . _ : -")]
pub struct InvalidClientId;

impl ClientId {
    /// `raw` as a client id, if it is key-safe (1-64 characters of `A-Z a-z 0-9 . _ : -`).
    pub fn parse(raw: &str) -> Result<Self, InvalidClientId> {
        let valid = !raw.is_empty()
            && raw.len() <= CLIENT_ID_MAX_LEN
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
        if valid {
            Ok(Self(raw.to_string()))
        } else {
            Err(InvalidClientId)
        }
    }

    /// The id, as written into keys.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet_up_to_64_characters() {
        assert!(ClientId::parse("alice").is_ok());
        assert!(ClientId::parse("svc.billing:eu-1_a").is_ok());
        assert!(ClientId::parse(&"a".repeat(64)).is_ok());
        for bad in ["", "a b", "a{b}", "ü", "a/b", "a*", &"a".repeat(65)] {
            assert_eq!(ClientId::parse(bad), Err(InvalidClientId), "{bad:?}");
        }
    }
}
