//! What every stored text and instant must be, checked at the edge: Postgres refuses a
//! NUL byte in `text` and instants outside its range, and either would surface as a 500
//! from deep inside a query instead of a 400 naming the field.

use chrono::{DateTime, NaiveDate, Utc};

/// Text a client may make us store or look up: no control characters (NUL among them,
/// which Postgres cannot store; the rest only garble logs and pages).
pub fn is_printable(text: &str) -> bool {
    !text.chars().any(char::is_control)
}

/// The instants the service accepts from a client: from 1970 to the end of 9999.
/// Postgres stores 4713 BC to 294276 AD and chrono parses years beyond both ends; a
/// sale, or a search through its orders, needs neither.
pub fn is_storable(instant: DateTime<Utc>) -> bool {
    let first = NaiveDate::from_ymd_opt(1970, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0));
    let last = NaiveDate::from_ymd_opt(10_000, 1, 1).and_then(|d| d.and_hms_opt(0, 0, 0));
    match (first, last) {
        (Some(first), Some(last)) => (first.and_utc()..last.and_utc()).contains(&instant),
        _ => false,
    }
}

/// The range [`is_storable`] accepts, as the error messages spell it.
pub const STORABLE_RANGE: &str = "between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_with_a_control_character_is_not_printable() {
        assert!(is_printable("Laptop – 15\" «pro»"));
        assert!(!is_printable("nul\u{0}byte"));
        assert!(!is_printable("line\nbreak"));
    }

    #[test]
    fn instants_from_1970_to_9999_are_storable() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        assert!(is_storable(at("1970-01-01T00:00:00Z")));
        assert!(is_storable(at("9999-12-31T23:59:59.999999Z")));
        assert!(!is_storable(at("1969-12-31T23:59:59Z")));
        assert!(!is_storable(at("-5000-01-01T00:00:00Z")));
        assert!(!is_storable(at("+10000-01-01T00:00:00Z")));
    }
}
