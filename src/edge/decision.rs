//! What the engine answers a gateway: a request's descriptors in a domain, decided all or
//! nothing in one call, and the statuses and headers Envoy's API (and the NGINX gate)
//! return. Transport-free: the gRPC server and the HTTP gate both turn their request
//! into an [`EdgeRequest`] and their answer from an [`EdgeVerdict`].
//!
//! - **Matching.** Each descriptor finds its limit with envoyproxy/ratelimit's rule
//!   ([`DomainLimits::find`]); an unknown domain, an unknown descriptor and an
//!   `unlimited` one are `OK` with no limit, as there.
//! - **Counting.** Every limited descriptor is a rule of one [`Ask`]: enforced ones
//!   first, then shadow ones, each with its own key and cost. Two descriptors that land
//!   on the same key are one rule whose cost is their sum (counted twice in one script,
//!   both would read the count before either wrote).
//! - **Keys.** `<prefix>:{rls:<domain>}:<algorithm>:<rule>:<values>`: the domain's hash
//!   tag puts all of a domain's keys in one Cluster slot (one script call decides them
//!   together); `<rule>` is a stable hash of the limit's node path, so an edit elsewhere
//!   in the document keeps each count; `<values>` are the descriptor's values, each
//!   length-prefixed so no two descriptors share a key by accident.

use std::sync::Arc;
use std::time::Duration;

use super::domain_document::Unit;
use super::domain_limits::{DescriptorLimit, Quota};
use super::domain_store::DomainStore;
use super::key_registry::{KeyRegistry, Registered};
use crate::limiter::backend::Decision;
use crate::limiter::keys::KeySource;
use crate::limiter::policy::Rule;
use crate::limiter::{Algorithm, Answer, AnsweredBy, Ask, Cost, FailMode, Limiter};
use crate::metrics::Metrics;
use crate::vocabulary::Decision as Outcome;

/// Most descriptors one request may carry (each limited one is a key of one script call).
pub const MAX_DESCRIPTORS: usize = 16;
/// Most entries one descriptor may carry: a document's depth.
pub const MAX_ENTRIES: usize = super::domain_document::MAX_DEPTH;
/// Longest key or value of an entry, in bytes: a document's own entries' bound.
pub const MAX_ENTRY_BYTES: usize = 256;
/// Longest domain name, in bytes (a stored domain's bound).
pub const MAX_DOMAIN_BYTES: usize = 64;

/// One key/value entry of a descriptor, as the gateway sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The entry's key (`remote_address`, `path`, …).
    pub key: String,
    /// Its value.
    pub value: String,
}

/// One descriptor: its entries in order, and its own cost when it has one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// The entries, outermost first.
    pub entries: Vec<Entry>,
    /// Envoy's per-descriptor `hits_addend`: `None` (or 0) takes the request's.
    pub hits_addend: Option<u64>,
}

/// What a gateway asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EdgeRequest {
    /// The domain whose limits apply.
    pub domain: String,
    /// The request's descriptors, in order; each gets one status.
    pub descriptors: Vec<Descriptor>,
    /// Envoy's request-level `hits_addend`: 0 means 1.
    pub hits_addend: u64,
}

/// Why a request was not decided: the client sent what no gateway should (gRPC
/// `INVALID_ARGUMENT`, HTTP 400). Nothing was counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EdgeInputError {
    /// No domain, or one that cannot be a domain's name.
    #[error("domain must be 1 to {MAX_DOMAIN_BYTES} bytes")]
    Domain,
    /// No descriptor at all.
    #[error("at least one descriptor is required")]
    NoDescriptors,
    /// More than [`MAX_DESCRIPTORS`].
    #[error("at most {MAX_DESCRIPTORS} descriptors per request")]
    TooManyDescriptors,
    /// A descriptor with no entry, or more than [`MAX_ENTRIES`].
    #[error("descriptors[{0}] must have 1 to {MAX_ENTRIES} entries")]
    Entries(usize),
    /// An entry whose key is empty, or whose key or value is longer than
    /// [`MAX_ENTRY_BYTES`] or holds a control character.
    #[error("descriptors[{0}].entries[{1}]: key must be 1 to {MAX_ENTRY_BYTES} bytes and value at most {MAX_ENTRY_BYTES}, without control characters")]
    Entry(usize, usize),
    /// A cost above [`Cost::MAX`].
    #[error("hits_addend must be at most {}", Cost::MAX)]
    Cost,
}

/// Envoy's `Code`, as far as a decision goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Admitted (or not limited).
    Ok,
    /// Refused.
    OverLimit,
}

/// The limit a descriptor fell under, as Envoy's `RateLimit` message says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// The rule's name.
    pub name: String,
    /// Hits per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
}

/// One descriptor's answer (Envoy's `DescriptorStatus`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorStatus {
    /// `OverLimit` only for the descriptor whose rule refused.
    pub code: Code,
    /// Its limit; `None` for a descriptor without one (unknown, or `unlimited`).
    pub current_limit: Option<CurrentLimit>,
    /// What its rule has left after this request (0 when the request was refused or
    /// the count is unknown: answered without Redis).
    pub limit_remaining: u32,
    /// Until its rule admits again (a refusal), or its window ends.
    pub duration_until_reset: Option<Duration>,
}

/// The whole answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeVerdict {
    /// `OverLimit` when any enforced rule refused (or the domain fails closed).
    pub overall: Code,
    /// One per descriptor, in the request's order.
    pub statuses: Vec<DescriptorStatus>,
    /// `RateLimit-Policy`, `RateLimit` and, on a refusal, `Retry-After`: for the
    /// gateway to add to its answer.
    pub headers: Vec<(&'static str, String)>,
}

/// The edge's engine: the domains in force and the limiter that counts for them.
pub struct Edge {
    limiter: Arc<Limiter>,
    domains: Arc<DomainStore>,
    registry: KeyRegistry,
    prefix: Box<str>,
    /// `rls_decisions`, `rls_fail_mode`: counted here, so every transport counts alike.
    metrics: Arc<Metrics>,
}

/// A limited descriptor on its way into the [`Ask`].
struct Counted<'a> {
    limit: &'a DescriptorLimit,
    requests: u32,
    unit: Unit,
    key: String,
    cost: u64,
    /// The descriptors it answers for.
    descriptors: Vec<usize>,
}

impl Edge {
    /// The engine over `domains`, counting with `limiter`, each domain's distinct keys
    /// bounded by `registry` (whose key prefix the counters share), its decisions
    /// counted in `metrics`.
    pub fn new(
        limiter: Arc<Limiter>,
        domains: Arc<DomainStore>,
        registry: KeyRegistry,
        metrics: Arc<Metrics>,
    ) -> Self {
        let prefix = registry.prefix().into();
        Self {
            limiter,
            domains,
            registry,
            prefix,
            metrics,
        }
    }

    /// Decides `request` (see the module docs).
    pub async fn decide(&self, request: &EdgeRequest) -> Result<EdgeVerdict, EdgeInputError> {
        check(request)?;
        let request_cost = request.hits_addend.max(1);
        let mut statuses = vec![no_limit(); request.descriptors.len()];
        let Some(domain) = self.domains.current(&request.domain) else {
            self.count_unlimited("unknown");
            return Ok(verdict(Code::Ok, statuses, Vec::new()));
        };
        // envoyproxy/ratelimit's fixed window and Envoy's failing open, unless it says.
        let algorithm = domain.document.algorithm.unwrap_or(Algorithm::FixedWindow);
        let mut counted: Vec<Counted<'_>> = Vec::new();
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            let entries = descriptor
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()));
            let Some(limit) = domain.limits.find(entries) else {
                continue;
            };
            let Quota::PerUnit { unit, requests } = limit.quota else {
                continue; // unlimited: known, never counted
            };
            let cost = match descriptor.hits_addend {
                Some(hits) if hits > 0 => hits,
                _ => request_cost,
            };
            let key = self.key(&request.domain, algorithm, limit, descriptor);
            match counted.iter_mut().find(|c| c.key == key) {
                Some(same) => {
                    same.cost = same.cost.saturating_add(cost);
                    same.descriptors.push(index);
                }
                None => counted.push(Counted {
                    limit,
                    requests,
                    unit,
                    key,
                    cost,
                    descriptors: vec![index],
                }),
            }
        }
        if counted.is_empty() {
            self.count_unlimited(&request.domain);
            return Ok(verdict(Code::Ok, statuses, Vec::new()));
        }
        // Enforced rules first, then shadow ones, each in the request's order.
        counted.sort_by_key(|c| c.limit.shadow);
        let enforced = counted.iter().filter(|c| !c.limit.shadow).count();
        let mut costs = Vec::with_capacity(counted.len());
        for c in &counted {
            costs.push(Cost::new(c.cost).ok_or(EdgeInputError::Cost)?);
        }
        let windows: Vec<(&str, u64)> = counted
            .iter()
            .map(|c| (c.key.as_str(), c.unit.millis()))
            .collect();
        // A registry Redis cannot answer leaves the decision to the same Redis, which
        // then fails over by the domain's fail mode.
        if let Ok(Registered::NoRoomFor(i)) =
            self.registry.register(&request.domain, &windows).await
        {
            for &d in &counted[i].descriptors {
                statuses[d].code = Code::OverLimit;
            }
            self.metrics
                .rls_decisions
                .with_label_values(&[
                    request.domain.as_str(),
                    counted[i].limit.name.as_str(),
                    Outcome::Reject.label(),
                ])
                .inc();
            return Ok(verdict(
                Code::OverLimit,
                statuses,
                vec![("Retry-After", "1".to_string())],
            ));
        }
        let rules: Vec<Rule> = counted.iter().map(rule).collect();
        let keys: Vec<String> = counted.iter().map(|c| c.key.clone()).collect();
        let name = format!("rls:{}", request.domain);
        let fail_mode = domain.document.fail_mode.unwrap_or(FailMode::Open);
        let answer = self
            .limiter
            .ask(&Ask {
                name: &name,
                generation: u64::try_from(domain.version).unwrap_or(0),
                algorithm,
                fail_mode,
                rules: &rules,
                enforced,
                keys: &keys,
                costs: &costs,
            })
            .await;
        self.count(&request.domain, &counted, &answer);
        let quota = |c: &Counted<'_>| CurrentLimit {
            name: c.limit.name.clone(),
            requests_per_unit: c.requests,
            unit: c.unit,
        };
        for c in &counted {
            for &d in &c.descriptors {
                statuses[d].current_limit = Some(quota(c));
            }
        }
        let policy_header = counted[..enforced]
            .iter()
            .map(|c| {
                format!(
                    "\"{}\";q={};w={}",
                    c.limit.name,
                    c.requests,
                    c.unit.millis() / 1000
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let mut headers = Vec::new();
        if !policy_header.is_empty() {
            headers.push(("RateLimit-Policy", policy_header));
        }
        let overall = match answer {
            Answer::FailedOpen => Code::Ok,
            Answer::FailedClosed => {
                headers.push(("Retry-After", "1".to_string()));
                Code::OverLimit
            }
            Answer::Decided {
                decision,
                rule_remaining,
                ..
            } => match decision {
                Decision::Admitted {
                    tightest,
                    remaining,
                    next_slot_ms,
                    ..
                } => {
                    for (rule, c) in counted.iter().enumerate() {
                        let left = rule_remaining
                            .get(rule)
                            .copied()
                            .or((rule == tightest).then_some(remaining))
                            .unwrap_or(0);
                        for &d in &c.descriptors {
                            statuses[d].limit_remaining = clamp_u32(left);
                            statuses[d].duration_until_reset =
                                Some(if rule == tightest && remaining <= 0 {
                                    Duration::from_millis(next_slot_ms.max(0) as u64)
                                } else {
                                    Duration::from_millis(c.unit.millis())
                                });
                        }
                    }
                    if let Some(c) = counted.get(tightest).filter(|_| tightest < enforced) {
                        let reset_s = if remaining <= 0 {
                            (next_slot_ms.max(0) as u64).div_ceil(1000)
                        } else {
                            c.unit.millis() / 1000
                        };
                        headers.push((
                            "RateLimit",
                            format!("\"{}\";r={};t={}", c.limit.name, remaining.max(0), reset_s),
                        ));
                    }
                    Code::Ok
                }
                Decision::Refused {
                    rule,
                    retry_after_ms,
                    longest_retry_after_ms,
                } => {
                    let own = Duration::from_millis(retry_after_ms.max(1) as u64);
                    if let Some(c) = counted.get(rule) {
                        for &d in &c.descriptors {
                            statuses[d].code = Code::OverLimit;
                            statuses[d].duration_until_reset = Some(own);
                        }
                        headers.push((
                            "RateLimit",
                            format!(
                                "\"{}\";r=0;t={}",
                                c.limit.name,
                                (retry_after_ms.max(1) as u64).div_ceil(1000)
                            ),
                        ));
                    }
                    let longest =
                        (longest_retry_after_ms.max(retry_after_ms).max(1) as u64).div_ceil(1000);
                    headers.push(("Retry-After", longest.to_string()));
                    Code::OverLimit
                }
            },
        };
        Ok(verdict(overall, statuses, headers))
    }

    /// A request no rule limits: one pass under rule `none` (`domain` is `unknown` for a
    /// domain not stored, so the label stays bounded by the stored ones).
    fn count_unlimited(&self, domain: &str) {
        self.metrics
            .rls_decisions
            .with_label_values(&[domain, "none", Outcome::Pass.label()])
            .inc();
    }

    /// Counts `answer` as `limiter_decisions` counts a policy's: a pass for every rule
    /// (a shadow rule that would have refused: a reject), a reject for the refusing
    /// rule; and an answer of the fail mode's (`local`: not by Redis).
    fn count(&self, domain: &str, counted: &[Counted<'_>], answer: &Answer) {
        let decided = |c: &Counted<'_>, outcome: Outcome| {
            self.metrics
                .rls_decisions
                .with_label_values(&[domain, c.limit.name.as_str(), outcome.label()])
                .inc();
        };
        let failed = |mode: FailMode| {
            self.metrics
                .rls_fail_mode
                .with_label_values(&[domain, mode.label()])
                .inc();
        };
        match answer {
            Answer::FailedOpen => failed(FailMode::Open),
            Answer::FailedClosed => failed(FailMode::Closed),
            Answer::Decided { decision, by, .. } => {
                match by {
                    AnsweredBy::FallbackLimits => failed(FailMode::Local),
                    AnsweredBy::DenialCache => {
                        if let Decision::Refused { rule, .. } = decision {
                            if let Some(c) = counted.get(*rule) {
                                self.metrics
                                    .rls_local_refusals
                                    .with_label_values(&[domain, c.limit.name.as_str()])
                                    .inc();
                            }
                        }
                    }
                    AnsweredBy::Redis => {}
                }
                match *decision {
                    Decision::Admitted { shadow_refused, .. } => {
                        for (i, c) in counted.iter().enumerate() {
                            let refused = i < 32 && shadow_refused & (1 << i) != 0;
                            decided(
                                c,
                                if refused {
                                    Outcome::Reject
                                } else {
                                    Outcome::Pass
                                },
                            );
                        }
                    }
                    Decision::Refused { rule, .. } => {
                        if let Some(c) = counted.get(rule) {
                            decided(c, Outcome::Reject);
                        }
                    }
                }
            }
        }
    }

    /// The key of `limit` for `descriptor` (see the module docs).
    fn key(
        &self,
        domain: &str,
        algorithm: Algorithm,
        limit: &DescriptorLimit,
        descriptor: &Descriptor,
    ) -> String {
        use std::fmt::Write;
        let mut key = format!(
            "{}:{{rls:{domain}}}:{algorithm}:{:016x}:",
            self.prefix,
            path_hash(&limit.path)
        );
        for entry in &descriptor.entries {
            // Writing to a String cannot fail.
            let _ = write!(key, "{}:{}|", entry.value.len(), entry.value);
        }
        key
    }
}

/// The request's bounds (see [`EdgeInputError`]).
fn check(request: &EdgeRequest) -> Result<(), EdgeInputError> {
    if request.domain.is_empty() || request.domain.len() > MAX_DOMAIN_BYTES {
        return Err(EdgeInputError::Domain);
    }
    if request.descriptors.is_empty() {
        return Err(EdgeInputError::NoDescriptors);
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return Err(EdgeInputError::TooManyDescriptors);
    }
    let plain = |s: &str| !s.chars().any(char::is_control);
    for (d, descriptor) in request.descriptors.iter().enumerate() {
        if descriptor.entries.is_empty() || descriptor.entries.len() > MAX_ENTRIES {
            return Err(EdgeInputError::Entries(d));
        }
        for (e, entry) in descriptor.entries.iter().enumerate() {
            let key_ok = !entry.key.is_empty() && entry.key.len() <= MAX_ENTRY_BYTES;
            let value_ok = entry.value.len() <= MAX_ENTRY_BYTES;
            if !(key_ok && value_ok && plain(&entry.key) && plain(&entry.value)) {
                return Err(EdgeInputError::Entry(d, e));
            }
        }
        if descriptor
            .hits_addend
            .is_some_and(|h| h > u64::from(Cost::MAX))
        {
            return Err(EdgeInputError::Cost);
        }
    }
    if request.hits_addend > u64::from(Cost::MAX) {
        return Err(EdgeInputError::Cost);
    }
    Ok(())
}

/// The engine's rule for a limited descriptor: `requests` per `unit`, whichever the
/// domain's algorithm (a bucket holds `requests` and refills them over the unit).
fn rule(c: &Counted<'_>) -> Rule {
    let window_ms = c.unit.millis();
    let threshold = u64::from(c.requests);
    Rule {
        name: c.limit.name.clone(),
        key: KeySource::Literal(c.limit.path.clone()),
        window_ms,
        threshold,
        capacity: threshold,
        refill_tokens: threshold,
        refill_ms: window_ms,
        max_delay_ms: 0,
        shadow: c.limit.shadow,
        message: String::new(),
    }
}

fn no_limit() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok,
        current_limit: None,
        limit_remaining: 0,
        duration_until_reset: None,
    }
}

fn verdict(
    overall: Code,
    statuses: Vec<DescriptorStatus>,
    headers: Vec<(&'static str, String)>,
) -> EdgeVerdict {
    EdgeVerdict {
        overall,
        statuses,
        headers,
    }
}

fn clamp_u32(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

/// FNV-1a, 64 bits: stable across builds and instances (std's hasher is neither), and
/// the path it hashes is the operator's, not a client's.
fn path_hash(path: &str) -> u64 {
    path.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(descriptors: Vec<Descriptor>) -> EdgeRequest {
        EdgeRequest {
            domain: "d".into(),
            descriptors,
            hits_addend: 0,
        }
    }

    fn descriptor(entries: &[(&str, &str)]) -> Descriptor {
        Descriptor {
            entries: entries
                .iter()
                .map(|&(key, value)| Entry {
                    key: key.into(),
                    value: value.into(),
                })
                .collect(),
            hits_addend: None,
        }
    }

    #[test]
    fn requests_past_the_bounds_are_refused_by_what_is_wrong() {
        let long = "x".repeat(MAX_ENTRY_BYTES + 1);
        assert_eq!(check(&request(vec![])), Err(EdgeInputError::NoDescriptors));
        assert_eq!(
            check(&request(vec![
                descriptor(&[("a", "1")]);
                MAX_DESCRIPTORS + 1
            ])),
            Err(EdgeInputError::TooManyDescriptors)
        );
        assert_eq!(
            check(&request(vec![descriptor(&[("a", "1")]), descriptor(&[])])),
            Err(EdgeInputError::Entries(1))
        );
        assert_eq!(
            check(&request(vec![descriptor(&[("a", "1"), ("b", &long)])])),
            Err(EdgeInputError::Entry(0, 1))
        );
        assert_eq!(
            check(&request(vec![descriptor(&[("", "1")])])),
            Err(EdgeInputError::Entry(0, 0))
        );
        assert_eq!(
            check(&request(vec![descriptor(&[("a", "x\ny")])])),
            Err(EdgeInputError::Entry(0, 0))
        );
        let mut costly = request(vec![descriptor(&[("a", "1")])]);
        costly.hits_addend = u64::from(Cost::MAX) + 1;
        assert_eq!(check(&costly), Err(EdgeInputError::Cost));
        let mut domainless = request(vec![descriptor(&[("a", "1")])]);
        domainless.domain.clear();
        assert_eq!(check(&domainless), Err(EdgeInputError::Domain));
        assert_eq!(
            check(&request(vec![
                descriptor(&[("a", ""); MAX_ENTRIES]);
                MAX_DESCRIPTORS
            ])),
            Ok(())
        );
    }

    #[test]
    fn the_rule_hash_is_the_same_in_every_build() {
        assert_eq!(path_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(path_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
