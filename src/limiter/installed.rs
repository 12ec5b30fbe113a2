//! The policies in force as the limiter holds them: each with its metric series
//! resolved once per rule change, so a decision never looks a series up by label.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus::{Histogram, IntCounter};

use super::{Algorithm, Policy, PolicySet};
use crate::metrics::Metrics;

/// The policies in force, each with its metric handles resolved, and the generation
/// that the denial cache stamps its entries with.
pub(super) struct Installed {
    pub(super) set: PolicySet,
    pub(super) generation: u64,
    pub(super) policies: HashMap<String, Arc<Enforced>>,
}

/// A policy and its metric series, looked up once per rule change instead of by label
/// on every decision.
pub(super) struct Enforced {
    pub(super) policy: Arc<Policy>,
    /// Per rule: `limiter_decisions{outcome="pass"}`, `{outcome="reject"}`, and
    /// `limiter_local_refusals`.
    pub(super) passes: Vec<IntCounter>,
    pub(super) rejects: Vec<IntCounter>,
    pub(super) local_refusals: Vec<IntCounter>,
    pub(super) fail_open: IntCounter,
    pub(super) fail_closed: IntCounter,
    /// Per algorithm (indexed by `Algorithm as usize`).
    pub(super) latency: [Histogram; Algorithm::ALL.len()],
}

impl Installed {
    pub(super) fn new(set: PolicySet, generation: u64, metrics: &Metrics) -> Self {
        let policies = set
            .iter()
            .map(|policy| {
                let name = policy.name.as_str();
                let per_rule = |counters: &prometheus::IntCounterVec, outcome: Option<&str>| {
                    policy
                        .rules
                        .iter()
                        .map(|rule| match outcome {
                            Some(outcome) => {
                                counters.with_label_values(&[name, rule.name.as_str(), outcome])
                            }
                            None => counters.with_label_values(&[name, rule.name.as_str()]),
                        })
                        .collect()
                };
                let enforced = Enforced {
                    policy: Arc::clone(policy),
                    passes: per_rule(&metrics.limiter_decisions, Some("pass")),
                    rejects: per_rule(&metrics.limiter_decisions, Some("reject")),
                    local_refusals: per_rule(&metrics.limiter_local_refusals, None),
                    fail_open: metrics.limiter_fail_open.with_label_values(&[name]),
                    fail_closed: metrics.limiter_fail_closed.with_label_values(&[name]),
                    latency: Algorithm::ALL.map(|a| {
                        metrics
                            .limiter_latency
                            .with_label_values(&[name, a.as_str()])
                    }),
                };
                (policy.name.clone(), Arc::new(enforced))
            })
            .collect();
        Self {
            set,
            generation,
            policies,
        }
    }
}
