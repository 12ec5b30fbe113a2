//! `Idempotency-Key`: a client's name for one attempt, part of a Redis key, so bounded
//! in length and alphabet before it is used.

/// 1 to 64 characters of `[A-Za-z0-9_-]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

/// A refused `Idempotency-Key`: 400 `VALIDATION_FAILED`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("Idempotency-Key must be 1 to 64 characters of A-Z a-z 0-9 _ -")]
pub struct InvalidIdempotencyKey;

impl IdempotencyKey {
    /// `raw` as a key, if it is 1-64 characters of `A-Z a-z 0-9 _ -`.
    pub fn parse(raw: &str) -> Result<Self, InvalidIdempotencyKey> {
        let valid = (1..=64).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if valid {
            Ok(Self(raw.to_string()))
        } else {
            Err(InvalidIdempotencyKey)
        }
    }

    /// The key, as written into Redis keys.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded_and_plain() {
        assert!(IdempotencyKey::parse("a").is_ok());
        assert!(IdempotencyKey::parse("Buy_2026-11-30_abc").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(64)).is_ok());
        for bad in ["", "a b", "a|b", "a:b", "ключ", &"k".repeat(65)] {
            assert_eq!(
                IdempotencyKey::parse(bad),
                Err(InvalidIdempotencyKey),
                "{bad:?}"
            );
        }
    }
}
