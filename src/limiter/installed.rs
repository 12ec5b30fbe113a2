//! The policies in force as the limiter holds them: each with its metric series
//! resolved once per rule change, so a decision never looks a series up by label.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use prometheus::{Histogram, IntGauge};

use super::{Algorithm, Policy, PolicySet};
use crate::metrics::Metrics;
use crate::tally::{Counted, Counter};
use crate::vocabulary::{Decision, LimiterMode};

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
    /// `limiter_local_refusals`, each with its tally cell.
    pub(super) passes: Vec<Counter>,
    pub(super) rejects: Vec<Counter>,
    pub(super) local_refusals: Vec<Counter>,
    /// Per rule: `limiter_near_limit` and `limiter_shadow_refusals` (shadow rules
    /// only ever count the latter, enforced rules never do), each with its tally cell.
    pub(super) near_limit: Vec<Counter>,
    pub(super) shadow_refusals: Vec<Counter>,
    pub(super) fail_open: Counter,
    pub(super) fail_closed: prometheus::IntCounter,
    /// Per algorithm (indexed by `Algorithm as usize`).
    pub(super) latency: [Histogram; Algorithm::ALL.len()],
    /// `limiter_mode{mode=…}`, in the order of [`LimiterMode::ALL`], and the index of
    /// the one at 1 ([`NO_MODE`] before the first decision).
    modes: Vec<IntGauge>,
    mode: AtomicU8,
}

/// No decision yet under this rule set.
const NO_MODE: u8 = u8::MAX;

impl Installed {
    pub(super) fn new(set: PolicySet, generation: u64, metrics: &Metrics) -> Self {
        let policies = set
            .iter()
            .map(|policy| {
                let name = policy.name.as_str();
                let decisions = |decision: Decision| {
                    policy
                        .rules
                        .iter()
                        .map(|rule| {
                            let labels = [name, rule.name.as_str(), decision.label()];
                            let counted = Counted::Decision {
                                policy: name.to_string(),
                                rule: rule.name.clone(),
                                decision,
                            };
                            Counter::new(
                                metrics.limiter_decisions.with_label_values(&labels),
                                metrics.tally.cell(counted),
                            )
                        })
                        .collect()
                };
                // One counter per rule of a family labelled by policy and dimension.
                let per_rule =
                    |family: &prometheus::IntCounterVec, counted: fn(String, String) -> Counted| {
                        policy
                            .rules
                            .iter()
                            .map(|rule| {
                                Counter::new(
                                    family.with_label_values(&[name, rule.name.as_str()]),
                                    metrics
                                        .tally
                                        .cell(counted(name.to_string(), rule.name.clone())),
                                )
                            })
                            .collect()
                    };
                let local_refusals = per_rule(&metrics.limiter_local_refusals, |policy, rule| {
                    Counted::LocalRefusal { policy, rule }
                });
                let near_limit = per_rule(&metrics.limiter_near_limit, |policy, rule| {
                    Counted::NearLimit { policy, rule }
                });
                let shadow_refusals = per_rule(&metrics.limiter_shadow_refusals, |policy, rule| {
                    Counted::ShadowRefusal { policy, rule }
                });
                let fail_open = Counter::new(
                    metrics.limiter_fail_open.with_label_values(&[name]),
                    metrics.tally.cell(Counted::FailOpen {
                        policy: name.to_string(),
                    }),
                );
                let enforced = Enforced {
                    policy: Arc::clone(policy),
                    passes: decisions(Decision::Pass),
                    rejects: decisions(Decision::Reject),
                    local_refusals,
                    near_limit,
                    shadow_refusals,
                    fail_open,
                    fail_closed: metrics.limiter_fail_closed.with_label_values(&[name]),
                    latency: Algorithm::ALL.map(|a| {
                        metrics
                            .limiter_latency
                            .with_label_values(&[name, a.as_str()])
                    }),
                    modes: LimiterMode::ALL
                        .iter()
                        .map(|mode| {
                            metrics
                                .limiter_mode
                                .with_label_values(&[name, mode.label()])
                        })
                        .collect(),
                    mode: AtomicU8::new(NO_MODE),
                };
                // A fresh process shows `redis` until a decision says otherwise; a rule
                // change keeps the series as the last decision left them.
                if enforced.modes.iter().all(|gauge| gauge.get() == 0) {
                    enforced.decided_in(LimiterMode::Redis);
                }
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

impl Enforced {
    /// Notes how the policy just decided: the mode's series goes to 1 and the others
    /// to 0, only when the mode changes (one atomic swap per decision otherwise).
    pub(super) fn decided_in(&self, mode: LimiterMode) {
        let index = LimiterMode::ALL
            .iter()
            .position(|m| *m == mode)
            .unwrap_or_default();
        if self.mode.swap(index as u8, Ordering::Relaxed) != index as u8 {
            for (i, gauge) in self.modes.iter().enumerate() {
                gauge.set(i64::from(i == index));
            }
        }
    }
}
