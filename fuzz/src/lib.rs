//! What the fuzz targets check: the property tests' own checks
//! (`tests/api/parsers/checks.rs`), included as they are, so `make fuzz` and `make test`
//! hold the parsers to one set of invariants.

#[path = "../../tests/api/parsers/checks.rs"]
pub mod checks;
