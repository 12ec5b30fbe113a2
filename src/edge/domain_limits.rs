//! A domain's document compiled for lookups: which limit, if any, a request's descriptor
//! (its ordered key/value entries) falls under.
//!
//! The rule is envoyproxy/ratelimit's (`GetLimit`), so that its users' files mean the
//! same here: the entries are matched one level at a time, each against the value
//! written for its key (`key: path, value: /login`), else a value ending in `*` that it
//! begins with (the first such, in the document's order), else the key alone (any
//! value). A descriptor has the limit of the node its **last** entry matched; a
//! descriptor that stops above a limit, runs past the configured depth, or misses at
//! some level has none (its status is OK, with no limit).

use std::collections::HashMap;

use super::domain_document::{DescriptorNode, DomainDocument, Unit};

/// What a descriptor that ends at a node is limited to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorLimit {
    /// The rule's place in its domain, in the document's order (stable while the
    /// document is): what the domain's rules are counted under.
    pub rule: usize,
    /// The rule's name in metrics and answers: the document's `name`, or the path of
    /// `key` / `key_value` segments joined by `.`.
    pub name: String,
    /// The node's path of `key` / `key_value` segments joined by `.`: unique in its
    /// domain and unchanged by edits elsewhere in the document, so its counts' keys are
    /// built from it (never from `rule`, which an edit above it renumbers).
    pub path: String,
    /// Counted and reported, never refusing.
    pub shadow: bool,
    /// The limit itself.
    pub quota: Quota,
}

/// A limit, or its absence on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    /// `requests_per_unit` hits per `unit`.
    PerUnit {
        /// The window.
        unit: Unit,
        /// Hits admitted in it.
        requests: u32,
    },
    /// Known and never counted.
    Unlimited,
}

/// One level of the tree: the nodes its entries may match.
#[derive(Debug, Default)]
struct Level {
    /// `(key, value)` written in full.
    exact: HashMap<(String, String), usize>,
    /// `(key, prefix)` of values ending in `*`, in the document's order.
    prefixes: Vec<(String, String, usize)>,
    /// `key` without a value: any value.
    any: HashMap<String, usize>,
}

#[derive(Debug)]
struct Node {
    limit: Option<DescriptorLimit>,
    children: Level,
}

/// A domain's limits, ready for lookups.
#[derive(Debug)]
pub struct DomainLimits {
    root: Level,
    nodes: Vec<Node>,
    rules: usize,
}

impl DomainLimits {
    /// Compiles a checked document ([`DomainDocument::check`]).
    pub fn new(document: &DomainDocument) -> Self {
        let mut limits = Self {
            root: Level::default(),
            nodes: Vec::new(),
            rules: 0,
        };
        limits.root = limits.level(&document.descriptors, "");
        limits
    }

    fn level(&mut self, nodes: &[DescriptorNode], path: &str) -> Level {
        let mut level = Level::default();
        for node in nodes {
            let segment = match &node.value {
                Some(value) => format!("{}_{value}", node.key),
                None => node.key.clone(),
            };
            let here = if path.is_empty() {
                segment
            } else {
                format!("{path}.{segment}")
            };
            let limit = node.rate_limit.as_ref().map(|limit| {
                let rule = self.rules;
                self.rules += 1;
                DescriptorLimit {
                    rule,
                    name: limit.name.clone().unwrap_or_else(|| here.clone()),
                    path: here.clone(),
                    shadow: node.shadow_mode,
                    quota: match (limit.unlimited, limit.unit, limit.requests_per_unit) {
                        (false, Some(unit), Some(requests)) => Quota::PerUnit { unit, requests },
                        // A checked document has no other shape: unlimited, or complete.
                        _ => Quota::Unlimited,
                    },
                }
            });
            let children = self.level(&node.descriptors, &here);
            let index = self.nodes.len();
            self.nodes.push(Node { limit, children });
            match &node.value {
                Some(value) => match value.strip_suffix('*') {
                    Some(prefix) => {
                        level
                            .prefixes
                            .push((node.key.clone(), prefix.to_string(), index))
                    }
                    None => {
                        level.exact.insert((node.key.clone(), value.clone()), index);
                    }
                },
                None => {
                    level.any.insert(node.key.clone(), index);
                }
            }
        }
        level
    }

    /// How many limits the domain has (unlimited ones included): rules `0..rules()`.
    pub fn rules(&self) -> usize {
        self.rules
    }

    /// The limit of a request's descriptor with these entries, if it has one.
    pub fn find<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<&DescriptorLimit> {
        let mut level = &self.root;
        let mut reached = None;
        for (key, value) in entries {
            if reached.is_some() {
                // The previous entry's node has no children: the descriptor runs past
                // the configuration's depth.
                let node: &Node = &self.nodes[reached?];
                level = &node.children;
            }
            let found = level
                .exact
                .get(&(key.to_string(), value.to_string()))
                .or_else(|| {
                    level
                        .prefixes
                        .iter()
                        .find(|(k, prefix, _)| k == key && value.starts_with(prefix.as_str()))
                        .map(|(_, _, index)| index)
                })
                .or_else(|| level.any.get(key))?;
            reached = Some(*found);
        }
        self.nodes[reached?].limit.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(yaml: &str) -> DomainLimits {
        DomainLimits::new(&DomainDocument::from_yaml(yaml).unwrap())
    }

    const TREE: &str = r#"
domain: d
descriptors:
  - key: database
    value: users
    rate_limit: { unit: second, requests_per_unit: 500 }
  - key: database
    rate_limit: { unit: second, requests_per_unit: 50 }
  - key: path
    value: /admin*
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 5 }
  - key: path
    value: /a*
    rate_limit: { unit: minute, requests_per_unit: 7 }
  - key: remote_address
    descriptors:
      - key: user
        rate_limit: { name: per_user, unit: hour, requests_per_unit: 100 }
  - key: internal
    rate_limit: { unlimited: true }
"#;

    fn quota(limit: Option<&DescriptorLimit>) -> Option<(String, bool, Quota)> {
        limit.map(|l| (l.name.clone(), l.shadow, l.quota))
    }

    fn per(unit: Unit, requests: u32) -> Quota {
        Quota::PerUnit { unit, requests }
    }

    #[test]
    fn a_written_value_comes_before_a_prefix_and_a_prefix_before_the_key_alone() {
        let limits = limits(TREE);
        assert_eq!(limits.rules(), 6);
        assert_eq!(
            quota(limits.find([("database", "users")])),
            Some(("database_users".into(), false, per(Unit::Second, 500)))
        );
        assert_eq!(
            quota(limits.find([("database", "orders")])),
            Some(("database".into(), false, per(Unit::Second, 50)))
        );
        // The first prefix in the document's order that the value begins with.
        assert_eq!(
            quota(limits.find([("path", "/admin/users")])),
            Some(("path_/admin*".into(), true, per(Unit::Minute, 5)))
        );
        assert_eq!(
            quota(limits.find([("path", "/api")])),
            Some(("path_/a*".into(), false, per(Unit::Minute, 7)))
        );
        assert_eq!(limits.find([("path", "/b")]), None);
        assert_eq!(
            quota(limits.find([("internal", "x")])),
            Some(("internal".into(), false, Quota::Unlimited))
        );
    }

    #[test]
    fn only_the_node_of_the_last_entry_limits_a_descriptor() {
        let limits = limits(TREE);
        let nested = limits.find([("remote_address", "10.0.0.1"), ("user", "7")]);
        assert_eq!(
            quota(nested),
            Some(("per_user".into(), false, per(Unit::Hour, 100)))
        );
        // Stops above the limit: remote_address alone has none.
        assert_eq!(limits.find([("remote_address", "10.0.0.1")]), None);
        // Runs past the configured depth.
        assert_eq!(limits.find([("database", "users"), ("table", "t")]), None);
        // Misses at the second level.
        assert_eq!(
            limits.find([("remote_address", "10.0.0.1"), ("tenant", "7")]),
            None
        );
        // No entry, no limit; an unknown key, none.
        assert_eq!(limits.find([]), None);
        assert_eq!(limits.find([("unknown", "x")]), None);
    }

    #[test]
    fn rules_are_numbered_in_the_documents_order() {
        let limits = limits(TREE);
        let rules: Vec<usize> = [
            vec![("database", "users")],
            vec![("database", "x")],
            vec![("path", "/admin")],
            vec![("path", "/a")],
            vec![("remote_address", "r"), ("user", "u")],
            vec![("internal", "i")],
        ]
        .into_iter()
        .map(|entries| limits.find(entries).unwrap().rule)
        .collect();
        assert_eq!(rules, [0, 1, 2, 3, 4, 5]);
    }
}
