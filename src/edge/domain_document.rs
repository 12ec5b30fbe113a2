//! One domain's limits as an operator writes them: envoyproxy/ratelimit's configuration
//! format (the shape of its YAML files, snake_case on purpose: it is that file's format),
//! plus two extensions of ours, `algorithm` and `fail_mode`.
//!
//! ```yaml
//! domain: api_gateway
//! algorithm: sliding_window     # ours; fixed_window when absent, as envoyproxy/ratelimit counts
//! fail_mode: local              # ours; open when absent, as Envoy's filter fails open
//! descriptors:
//!   - key: remote_address
//!     rate_limit: { unit: second, requests_per_unit: 10 }
//!   - key: path
//!     value: /login
//!     shadow_mode: true
//!     rate_limit: { unit: minute, requests_per_unit: 5 }
//!     descriptors:
//!       - key: user
//!         rate_limit: { unit: hour, requests_per_unit: 100 }
//! ```
//!
//! A document is parsed whole ([`DomainDocument::from_yaml`], or serde from JSON, the
//! same document) and then checked ([`DomainDocument::check`]): a field this service
//! does not support is refused by name, never ignored, so a file written for
//! envoyproxy/ratelimit either means here what it meant there or does not load.
//! docs/edge.md has the table of what is supported.

use std::collections::HashSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limiter::Algorithm;
use crate::vocabulary::FailMode;

/// Most bytes of a document's YAML: a domain's limits are a page, not a dataset.
pub const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

/// Most characters of a domain's name. It becomes a Redis hash tag and a metric label.
pub const MAX_DOMAIN_LEN: usize = 64;

/// Most characters of a descriptor's key or value in a document.
pub const MAX_ENTRY_LEN: usize = 256;

/// Most levels of nested descriptors (a request's descriptor has at most as many
/// entries).
pub const MAX_DEPTH: usize = 8;

/// Most descriptors in a document, at every level together.
pub const MAX_NODES: usize = 1_000;

/// One domain's limits (the top of one envoyproxy/ratelimit YAML file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DomainDocument {
    /// The domain Envoy names in each request (`RateLimitRequest.domain`).
    pub domain: String,
    /// The descriptors with their limits; a request's descriptor that matches none has
    /// no limit.
    #[serde(default)]
    pub descriptors: Vec<DescriptorNode>,
    /// Ours: how the domain's limits count (one algorithm per domain: a request's
    /// descriptors are decided together, in one call). `fixed_window` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "sliding_window")]
    pub algorithm: Option<Algorithm>,
    /// Ours: what a decision is while Redis cannot be reached. `open` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "local")]
    pub fail_mode: Option<FailMode>,
}

/// One descriptor entry of the configuration: a key, optionally a value, and what a
/// request's descriptor that ends here is limited to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DescriptorNode {
    /// The entry's key.
    pub key: String,
    /// The entry's value: absent, any value (each value counted apart); ending in `*`,
    /// the values that begin with what precedes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The limit of a request's descriptor whose last entry matches here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    /// Decided and counted, but never refuses: the answer says what it would have been
    /// (envoyproxy/ratelimit's shadow mode).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow_mode: bool,
    /// Accepted for envoyproxy/ratelimit's files: per-value metrics there. Here a rule's
    /// metrics are labelled by the rule, never by a client's value (bounded labels), so
    /// it changes nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detailed_metric: bool,
    /// Entries nested under this one: a request's descriptor continues here with its
    /// next entry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(no_recursion)]
    pub descriptors: Vec<DescriptorNode>,
}

/// A limit: so many requests (hits) per unit of time, or none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// The unit `requests_per_unit` counts in (required unless `unlimited`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<Unit>,
    /// Hits admitted per unit (required and above 0 unless `unlimited`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_unit: Option<u32>,
    /// No limit at all: the descriptor is known, and never counted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unlimited: bool,
    /// The rule's name in metrics and answers; `<key>` or `<key>_<value>` of its path
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// envoyproxy/ratelimit's `replaces` (one limit cancelling others): not supported,
    /// refused by [`DomainDocument::check`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub replaces: Option<Vec<serde_json::Value>>,
}

/// The units of envoyproxy/ratelimit's format that are supported. Its files spell them
/// in lower or upper case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// One second.
    #[serde(alias = "SECOND")]
    Second,
    /// One minute.
    #[serde(alias = "MINUTE")]
    Minute,
    /// One hour.
    #[serde(alias = "HOUR")]
    Hour,
    /// One day.
    #[serde(alias = "DAY")]
    Day,
}

impl Unit {
    /// The unit's length in milliseconds.
    pub fn millis(self) -> u64 {
        match self {
            Self::Second => 1_000,
            Self::Minute => 60_000,
            Self::Hour => 3_600_000,
            Self::Day => 86_400_000,
        }
    }
}

/// Why a document was refused, and where (a path such as `descriptors[1].descriptors[0].value`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentError {
    /// The field at fault.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for DocumentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl std::error::Error for DocumentError {}

fn refused(field: impl Into<String>, reason: impl Into<String>) -> DocumentError {
    DocumentError {
        field: field.into(),
        reason: reason.into(),
    }
}

impl DomainDocument {
    /// Parses one YAML document (an envoyproxy/ratelimit file) and checks it. Its size is
    /// bounded before it is parsed, and the parser is panic-free (`serde-saphyr`).
    pub fn from_yaml(text: &str) -> Result<Self, DocumentError> {
        if text.len() > MAX_DOCUMENT_BYTES {
            return Err(refused(
                "",
                format!("longer than {MAX_DOCUMENT_BYTES} bytes"),
            ));
        }
        let document: Self =
            serde_saphyr::from_str(text).map_err(|e| refused("", e.to_string()))?;
        document.check()?;
        Ok(document)
    }

    /// The algorithm the domain counts with.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm.unwrap_or(Algorithm::FixedWindow)
    }

    /// What a decision is while Redis cannot be reached.
    pub fn fail_mode(&self) -> FailMode {
        self.fail_mode.unwrap_or(FailMode::Open)
    }

    /// Checks what serde cannot: the domain's name, the bounds, every limit complete,
    /// no two siblings alike, and nothing this service would silently read otherwise.
    pub fn check(&self) -> Result<(), DocumentError> {
        check_domain(&self.domain)?;
        if self.algorithm == Some(Algorithm::LeakyBucket) {
            // A shaper answers "wait", which the rate-limit API cannot say.
            return Err(refused(
                "algorithm",
                "leaky_bucket delays admissions, which Envoy's API cannot express",
            ));
        }
        let mut nodes = 0;
        check_level(&self.descriptors, "descriptors", 1, &mut nodes)
    }
}

/// A domain's name: 1 to [`MAX_DOMAIN_LEN`] characters of `A-Z a-z 0-9 _ - .`.
pub fn check_domain(domain: &str) -> Result<(), DocumentError> {
    if domain.is_empty() || domain.len() > MAX_DOMAIN_LEN {
        return Err(refused(
            "domain",
            format!("must be 1 to {MAX_DOMAIN_LEN} characters"),
        ));
    }
    if !domain
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        return Err(refused(
            "domain",
            "may hold only letters, digits, '_', '-' and '.'",
        ));
    }
    Ok(())
}

fn check_level(
    level: &[DescriptorNode],
    path: &str,
    depth: usize,
    nodes: &mut usize,
) -> Result<(), DocumentError> {
    if level.is_empty() {
        return Ok(());
    }
    if depth > MAX_DEPTH {
        return Err(refused(
            path,
            format!("nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    let mut seen = HashSet::new();
    for (i, node) in level.iter().enumerate() {
        let here = format!("{path}[{i}]");
        *nodes += 1;
        if *nodes > MAX_NODES {
            return Err(refused(here, format!("more than {MAX_NODES} descriptors")));
        }
        check_entry(&node.key, &format!("{here}.key"))?;
        if let Some(value) = &node.value {
            check_entry(value, &format!("{here}.value"))?;
            if value.find('*').is_some_and(|at| at + 1 != value.len()) {
                return Err(refused(
                    format!("{here}.value"),
                    "a wildcard '*' may only end a value",
                ));
            }
        }
        if !seen.insert((node.key.as_str(), node.value.as_deref())) {
            return Err(refused(
                here,
                "the same key and value appear twice at this level",
            ));
        }
        if let Some(limit) = &node.rate_limit {
            check_limit(limit, &format!("{here}.rate_limit"))?;
        }
        check_level(
            &node.descriptors,
            &format!("{here}.descriptors"),
            depth + 1,
            nodes,
        )?;
    }
    Ok(())
}

fn check_entry(text: &str, field: &str) -> Result<(), DocumentError> {
    if text.is_empty() || text.chars().count() > MAX_ENTRY_LEN {
        return Err(refused(
            field,
            format!("must be 1 to {MAX_ENTRY_LEN} characters"),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(refused(field, "may not hold control characters"));
    }
    Ok(())
}

fn check_limit(limit: &RateLimit, field: &str) -> Result<(), DocumentError> {
    if limit.replaces.is_some() {
        return Err(refused(
            format!("{field}.replaces"),
            "not supported: every matching limit applies, all or nothing",
        ));
    }
    if let Some(name) = &limit.name {
        check_entry(name, &format!("{field}.name"))?;
    }
    if limit.unlimited {
        if limit.unit.is_some() || limit.requests_per_unit.is_some() {
            return Err(refused(
                field,
                "an unlimited limit has no unit and no requests_per_unit",
            ));
        }
        return Ok(());
    }
    if limit.unit.is_none() {
        return Err(refused(format!("{field}.unit"), "required"));
    }
    match limit.requests_per_unit {
        Some(n) if n > 0 => Ok(()),
        _ => Err(refused(
            format!("{field}.requests_per_unit"),
            "required, above 0",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// envoyproxy/ratelimit's README example, as its users' files are written.
    const UPSTREAM: &str = r#"
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: SECOND
      requests_per_unit: 500
    detailed_metric: true

  - key: remote_address
    rate_limit:
      unit: hour
      requests_per_unit: 10
    descriptors:
      - key: path
        value: /foo*
        shadow_mode: true
        rate_limit:
          name: foo_paths
          unit: minute
          requests_per_unit: 2
  - key: internal
    rate_limit:
      unlimited: true
"#;

    #[test]
    fn envoyproxy_ratelimits_own_example_loads_as_its_json_twin() {
        let document = DomainDocument::from_yaml(UPSTREAM).unwrap();
        assert_eq!(document.domain, "mongo_cps");
        assert_eq!(document.descriptors.len(), 4);
        assert_eq!(document.algorithm(), Algorithm::FixedWindow);
        assert_eq!(document.fail_mode(), FailMode::Open);
        let nested = &document.descriptors[2].descriptors[0];
        assert!(nested.shadow_mode);
        assert_eq!(nested.value.as_deref(), Some("/foo*"));
        assert_eq!(
            nested
                .rate_limit
                .as_ref()
                .map(|l| (l.unit, l.requests_per_unit)),
            Some((Some(Unit::Minute), Some(2)))
        );
        assert!(
            document.descriptors[3]
                .rate_limit
                .as_ref()
                .unwrap()
                .unlimited
        );
        // The admin API's body is the same document as JSON.
        let json = serde_json::to_string(&document).unwrap();
        let twin: DomainDocument = serde_json::from_str(&json).unwrap();
        assert_eq!(twin, document);
    }

    #[test]
    fn the_extensions_are_read_and_a_shaper_is_refused() {
        let document = DomainDocument::from_yaml(
            "domain: d\nalgorithm: sliding_window\nfail_mode: local\ndescriptors: []\n",
        )
        .unwrap();
        assert_eq!(document.algorithm(), Algorithm::SlidingWindow);
        assert_eq!(document.fail_mode(), FailMode::Local);
        let shaper = DomainDocument::from_yaml("domain: d\nalgorithm: leaky_bucket\n");
        assert_eq!(shaper.unwrap_err().field, "algorithm");
    }

    fn field_of(yaml: &str) -> String {
        match DomainDocument::from_yaml(yaml) {
            Ok(_) => panic!("accepted: {yaml}"),
            Err(e) => e.field,
        }
    }

    #[test]
    fn each_unsupported_or_incomplete_field_is_refused_by_name() {
        let cases = [
            ("domain: ''\n", "domain"),
            ("domain: 'a b'\n", "domain"),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n",
                "descriptors[0].rate_limit.requests_per_unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 3}\n",
                "descriptors[0].rate_limit.unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
                "descriptors[0].rate_limit.requests_per_unit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
                "descriptors[0].rate_limit",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: x}]}\n",
                "descriptors[0].rate_limit.replaces",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n    value: 'a*b'\n",
                "descriptors[0].value",
            ),
            (
                "domain: d\ndescriptors:\n  - key: k\n  - key: k\n",
                "descriptors[1]",
            ),
            (
                "domain: d\ndescriptors:\n  - key: ''\n",
                "descriptors[0].key",
            ),
        ];
        for (yaml, field) in cases {
            assert_eq!(field_of(yaml), field, "{yaml}");
        }
    }

    #[test]
    fn an_unknown_field_or_unit_does_not_load() {
        for yaml in [
            "domain: d\ndescriptor: []\n",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: week, requests_per_unit: 1}\n",
            "domain: d\ndescriptors:\n  - key: k\n    quota: 3\n",
        ] {
            assert!(DomainDocument::from_yaml(yaml).is_err(), "{yaml}");
        }
    }

    #[test]
    fn depth_count_and_size_are_bounded() {
        let mut yaml = String::from("domain: d\ndescriptors:\n");
        for level in 0..=MAX_DEPTH {
            let indent = "    ".repeat(level);
            yaml.push_str(&format!("{indent}  - key: k{level}\n"));
            if level < MAX_DEPTH {
                yaml.push_str(&format!("{indent}    descriptors:\n"));
            }
        }
        let deepest = format!("descriptors{}", "[0].descriptors".repeat(MAX_DEPTH));
        assert_eq!(field_of(&yaml), deepest, "one level deeper than allowed");
        // One level less loads.
        let allowed = yaml.rsplit_once("    descriptors:").unwrap().0;
        assert!(DomainDocument::from_yaml(allowed).is_ok(), "{allowed}");

        let mut wide = String::from("domain: d\ndescriptors:\n");
        for i in 0..=MAX_NODES {
            wide.push_str(&format!("  - key: k{i}\n"));
        }
        assert_eq!(field_of(&wide), format!("descriptors[{MAX_NODES}]"));

        let huge = format!("domain: d\n#{}\n", "x".repeat(MAX_DOCUMENT_BYTES));
        assert_eq!(field_of(&huge), "");
    }
}
