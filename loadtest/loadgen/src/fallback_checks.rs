//! The side load's limits, proven from its ledger around Redis outages: the bounds
//! docs/limiter.md ("Fallback limits") writes down for a rule of threshold `T` and
//! window `W` shared by `n` instances, per key, over any span `L` shorter than `W`:
//!
//! | the span's admissions were decided | at most |
//! |---|---|
//! | in Redis only | `T` for the sliding log; `T + T·L/W` for a token bucket or GCRA (a full bucket and what refills in `L`) |
//! | in process only (Redis down) | `n·⌈T/n⌉` |
//! | on both sides of a switch, Redis back with its data | Redis's bound + `n·⌈T/n⌉` |
//! | across an outage after which Redis may have lost entries | not judged |
//!
//! Which row a group of admissions falls in comes from the script's marks (`outages`),
//! with `outages::MARK_SLACK` either way, always towards the looser row: a group is "in
//! process only" when its first send and last answer lie inside Redis's downtime,
//! "across" when they touch an outage's span, "not judged" when they touch one of
//! lost data. As in `limit_checks`, only certain breaches fail: a group is counted when
//! its first send and last answer are less than `W` apart (with the clock's slack),
//! and the "possible" breaches, counting lost answers and `orders_read`'s 5xx as
//! admissions, are only reported.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::limit_checks::clock_slack;
use crate::outages::{class, Class, Outage};
use crate::policies::{Policy, Rule};
use crate::side::{SidePlan, SideRecord};
use loadtest_core::report::Check;

/// How a rule counts, for its bound in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counting {
    /// The sliding log: `T` in any window.
    Log,
    /// A bucket of `T` refilled by `T` per window (token bucket, GCRA).
    Bucket,
}

impl Counting {
    /// The algorithms whose bound is written here.
    fn of(algorithm: &str) -> Option<Self> {
        match algorithm {
            "sliding_window" => Some(Self::Log),
            "token_bucket" | "gcra" => Some(Self::Bucket),
            _ => None,
        }
    }
}

/// One rule's bounds for one algorithm.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RuleBound {
    pub(crate) threshold: u64,
    pub(crate) window: Duration,
    pub(crate) counting: Counting,
    /// Instances sharing the rule while Redis is away.
    pub(crate) instances: u64,
}

impl RuleBound {
    /// What the instances admit together in process: `n·⌈T/n⌉`.
    fn in_process(&self) -> f64 {
        let n = self.instances.max(1);
        (n * self.threshold.div_ceil(n)) as f64
    }

    /// What Redis admits over a span (measured on Redis's clock).
    fn in_redis(&self, span: Duration) -> f64 {
        let t = self.threshold as f64;
        match self.counting {
            Counting::Log => t,
            Counting::Bucket => t + t * span.as_secs_f64() / self.window.as_secs_f64(),
        }
    }
}

/// The group of one class closest to (or furthest over) its bound.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tightest {
    pub(crate) key: String,
    pub(crate) count: u64,
    pub(crate) bound: f64,
    pub(crate) from: Duration,
    pub(crate) span: Duration,
}

impl Tightest {
    fn over(&self) -> bool {
        self.count as f64 > self.bound + 1e-9
    }

    fn describe(&self) -> String {
        format!(
            "{} admissions of {} in {:.1} s from {:.1} s (bound {})",
            self.count,
            self.key,
            self.span.as_secs_f64(),
            self.from.as_secs_f64(),
            trim(self.bound)
        )
    }
}

fn trim(bound: f64) -> String {
    if bound.fract() < 1e-9 {
        format!("{bound:.0}")
    } else {
        format!("{bound:.1}")
    }
}

/// For each class, the tightest group of `admissions` (send and answer instants) of
/// one key.
pub(crate) fn judge(
    key: &str,
    admissions: &mut [(Duration, Duration)],
    rule: RuleBound,
    outages: &[Outage],
    tightest: &mut BTreeMap<Class, Tightest>,
) {
    admissions.sort();
    let slack = clock_slack(rule.window);
    for i in 0..admissions.len() {
        let from = admissions[i].0;
        let mut last = admissions[i].1;
        for (j, admission) in admissions.iter().enumerate().skip(i) {
            last = last.max(admission.1);
            let span = last.saturating_sub(from);
            if span + slack >= rule.window {
                break;
            }
            let class = class(from, last, outages);
            let redis = rule.in_redis(span + slack);
            let bound = match class {
                Class::InRedis | Class::Unjudged => redis,
                Class::InProcess => rule.in_process(),
                Class::Across => redis + rule.in_process(),
            };
            let count = (j - i + 1) as u64;
            let closer = tightest
                .get(&class)
                .is_none_or(|t| count as f64 - bound > t.count as f64 - t.bound);
            if closer {
                let group = Tightest {
                    key: key.to_string(),
                    count,
                    bound,
                    from,
                    span,
                };
                tightest.insert(class, group);
            }
        }
    }
}

/// Which key of `rule` a side request counts against, or `None` when the rule's key
/// source is not one this load can tell.
fn key_of(rule: &Rule, plan: &SidePlan, r: &SideRecord) -> Option<String> {
    let stream = &plan.streams[r.stream];
    let value = match rule.key.as_str() {
        Some("client_id") => stream.key.clone(),
        Some("user") => format!("user {}", r.record.user),
        Some("ip") => format!("ip {}", loadtest_core::client::ip_of(r.record.ip)),
        Some("route") => "the route".to_string(),
        Some(_) => return None,
        None => format!("literal {}", rule.key),
    };
    // Each algorithm keeps its own keys.
    Some(format!("{} {value}", stream.algorithm))
}

/// One check per enforced rule of each side policy (and algorithm asked for). It fails
/// on a certain breach; with outages, also when the policy does not fail `local`.
pub(crate) fn fallback_checks(
    records: &[SideRecord],
    plan: &SidePlan,
    outages: &[Outage],
    instances: u64,
) -> Vec<Check> {
    let mut checks = Vec::new();
    for policy in &plan.policies {
        let mine: Vec<&SideRecord> = records
            .iter()
            .filter(|r| plan.streams[r.stream].route.policy() == policy.name)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let mut algorithms: Vec<&str> = mine
            .iter()
            .map(|r| plan.streams[r.stream].algorithm.as_str())
            .collect();
        algorithms.sort_unstable();
        algorithms.dedup();
        for rule in policy.rules.iter().filter(|r| !r.shadow) {
            for algorithm in &algorithms {
                let of_algorithm: Vec<&SideRecord> = mine
                    .iter()
                    .filter(|r| plan.streams[r.stream].algorithm == *algorithm)
                    .copied()
                    .collect();
                checks.push(rule_check(
                    policy,
                    rule,
                    algorithm,
                    &of_algorithm,
                    plan,
                    outages,
                    instances,
                ));
            }
        }
    }
    checks
}

fn rule_check(
    policy: &Policy,
    rule: &Rule,
    algorithm: &str,
    records: &[&SideRecord],
    plan: &SidePlan,
    outages: &[Outage],
    instances: u64,
) -> Check {
    let name = format!("fallback limit {}/{} ({algorithm})", policy.name, rule.name);
    let fail = |detail: String| Check {
        name: name.clone(),
        passed: false,
        detail,
    };
    if !policy.enabled {
        return fail(format!(
            "policy {} is disabled: nothing to prove",
            policy.name
        ));
    }
    if !outages.is_empty() && policy.fail_mode != "local" {
        return fail(format!(
            "policy {} fails {}, not local: no bound while Redis is away",
            policy.name, policy.fail_mode
        ));
    }
    let Some(counting) = Counting::of(algorithm) else {
        return Check {
            name,
            passed: true,
            detail: format!("not judged: no bound for {algorithm} is written here"),
        };
    };
    let bound = RuleBound {
        threshold: rule.threshold,
        window: Duration::from_millis(rule.window_ms),
        counting,
        instances,
    };
    let tightest = |counted: &dyn Fn(&SideRecord) -> bool| {
        let mut keys: BTreeMap<String, Vec<(Duration, Duration)>> = BTreeMap::new();
        for r in records.iter().filter(|r| counted(r)) {
            if let Some(key) = key_of(rule, plan, r) {
                keys.entry(key)
                    .or_default()
                    .push((r.record.sent, r.record.received));
            }
        }
        let mut tightest = BTreeMap::new();
        for (key, mut admissions) in keys {
            judge(&key, &mut admissions, bound, outages, &mut tightest);
        }
        tightest
    };
    let certain = tightest(&|r| r.record.admitted);
    let breach = |t: &BTreeMap<Class, Tightest>| {
        t.iter()
            .find(|(class, group)| **class != Class::Unjudged && group.over())
            .map(|(class, group)| format!("{}: {}", class.describe(), group.describe()))
    };
    let summary = certain
        .iter()
        .map(|(class, group)| format!("{}: {}", class.describe(), group.describe()))
        .collect::<Vec<_>>()
        .join("; ");
    let limits = format!(
        "{} per {} s over {instances} instances (in process {} each)",
        rule.threshold,
        rule.window_ms as f64 / 1000.0,
        rule.threshold.div_ceil(instances.max(1))
    );
    if let Some(breach) = breach(&certain) {
        return fail(format!("{limits}: {breach}"));
    }
    let possible = records
        .iter()
        .filter(|r| !r.record.admitted && r.possibly_admitted())
        .count();
    let detail = match breach(&tightest(&|r| r.possibly_admitted())) {
        Some(breach) if possible > 0 => format!(
            "{limits}; tightest {summary}; no certain breach, possible only if some of the {possible} lost or failed answers were admissions: {breach}"
        ),
        _ => format!("{limits}; tightest {summary}"),
    };
    Check {
        name,
        passed: true,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::side::{Route, Stream};
    use loadtest_core::client::Failure;
    use loadtest_core::ledger::Record;

    const S: fn(u64) -> Duration = Duration::from_secs;
    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Redis down from 100 s to 110 s, the instances back on it by 112 s.
    fn outage(kept: bool) -> Outage {
        Outage {
            kept,
            from: S(99),
            down: S(100),
            up: S(110),
            to: S(112),
        }
    }

    fn log_of(threshold: u64) -> RuleBound {
        RuleBound {
            threshold,
            window: S(60),
            counting: Counting::Log,
            instances: 2,
        }
    }

    /// `count` admissions from `from`, one every `every`, each answered in 2 ms.
    fn burst(from: Duration, every: Duration, count: u32) -> Vec<(Duration, Duration)> {
        (0..count)
            .map(|k| {
                let sent = from + every * k;
                (sent, sent + MS(2))
            })
            .collect()
    }

    fn tightest(
        admissions: &mut [(Duration, Duration)],
        rule: RuleBound,
        outages: &[Outage],
    ) -> BTreeMap<Class, Tightest> {
        let mut tightest = BTreeMap::new();
        judge("k", admissions, rule, outages, &mut tightest);
        tightest
    }

    #[test]
    fn a_group_is_judged_by_the_loosest_row_its_marks_allow() {
        let kept = [outage(true)];
        assert_eq!(class(S(50), S(90), &kept), Class::InRedis);
        assert_eq!(class(S(100) + MS(100), S(109), &kept), Class::InProcess);
        // Too near the marks to be sure no decision was Redis's.
        assert_eq!(class(S(100) + MS(50), S(109), &kept), Class::Across);
        assert_eq!(class(S(101), S(110), &kept), Class::Across);
        assert_eq!(class(S(60), S(99), &kept), Class::Across);
        assert_eq!(class(S(112) + MS(50), S(150), &kept), Class::Across);
        assert_eq!(class(S(112) + MS(101), S(150), &kept), Class::InRedis);
        // Lost data: nothing touching it is judged, not even inside the downtime.
        let lost = [outage(false)];
        assert_eq!(class(S(101), S(109), &lost), Class::Unjudged);
        assert_eq!(class(S(60), S(99), &lost), Class::Unjudged);
        assert_eq!(class(S(113), S(150), &lost), Class::InRedis);
    }

    #[test]
    fn the_rows_bounds_are_met_exactly_and_one_more_is_a_breach() {
        let outages = [outage(true)];
        // Redis admits 100 in its window before the outage, the instances 50 each
        // inside it: 200 across it, 100 in process, exactly the bounds.
        let mut admissions = burst(S(60), MS(100), 100);
        admissions.extend(burst(S(101), MS(50), 100));
        let t = tightest(&mut admissions, log_of(100), &outages);
        assert_eq!(
            (t[&Class::InRedis].count, t[&Class::InRedis].bound),
            (100, 100.0)
        );
        assert_eq!(
            (t[&Class::InProcess].count, t[&Class::InProcess].bound),
            (100, 100.0)
        );
        assert_eq!(
            (t[&Class::Across].count, t[&Class::Across].bound),
            (200, 200.0)
        );
        assert!(t.values().all(|g| !g.over()), "{t:?}");
        // One more in process is over both bounds that see it.
        admissions.push((S(108), S(108) + MS(2)));
        let t = tightest(&mut admissions, log_of(100), &outages);
        assert_eq!(t[&Class::InProcess].count, 101);
        assert!(t[&Class::InProcess].over() && t[&Class::Across].over());
        // Threshold 5 over 2 instances: 3 each, 6 together.
        let mut six = burst(S(101), S(1), 6);
        assert!(!tightest(&mut six, log_of(5), &outages)[&Class::InProcess].over());
        let mut seven = burst(S(101), S(1), 7);
        assert!(tightest(&mut seven, log_of(5), &outages)[&Class::InProcess].over());
    }

    #[test]
    fn a_bucket_may_add_its_refill_and_groups_a_window_apart_are_not_one() {
        let bucket = RuleBound {
            counting: Counting::Bucket,
            ..log_of(60)
        };
        // A full bucket at once, then one a second (its refill): 60 + 30 in 30 s is
        // within 60 + 60·30/60.
        let mut admissions = burst(S(10), MS(10), 60);
        admissions.extend(burst(S(11), S(1), 30));
        let t = tightest(&mut admissions, bucket, &[]);
        assert!(!t[&Class::InRedis].over(), "{t:?}");
        // Two full buckets a second apart are not.
        let mut admissions = burst(S(10), MS(10), 60);
        admissions.extend(burst(S(11), MS(10), 60));
        assert!(tightest(&mut admissions, bucket, &[])[&Class::InRedis].over());
        // The log: 100 and 100 more whose answers are a window apart are two windows.
        let mut admissions = burst(S(0), MS(10), 100);
        admissions.extend(burst(S(60), MS(10), 100));
        let t = tightest(&mut admissions, log_of(100), &[]);
        assert_eq!(t[&Class::InRedis].count, 100);
    }

    fn plan(fail_mode: &str) -> SidePlan {
        SidePlan {
            streams: vec![Stream {
                route: Route::Limited,
                algorithm: "sliding_window".into(),
                key: "client-a".into(),
                user: None,
                offset: Duration::ZERO,
            }],
            policies: vec![Policy {
                name: "limited".into(),
                algorithm: "sliding_window".into(),
                fail_mode: fail_mode.into(),
                enabled: true,
                rules: vec![Rule {
                    name: "client".into(),
                    key: serde_json::json!("client_id"),
                    window_ms: 60_000,
                    threshold: 5,
                    shadow: false,
                }],
            }],
            ip: 0,
            rate: 1.0,
        }
    }

    fn answered(status: u16, sent: Duration) -> SideRecord {
        SideRecord {
            stream: 0,
            route: Route::Limited,
            record: Record {
                target: 0,
                user: 0,
                ip: 0,
                sent,
                received: sent + MS(2),
                status,
                code: None,
                dimension: None,
                admitted: status == 200,
                failure: None,
                order_id: None,
            },
        }
    }

    #[test]
    fn a_policy_is_checked_per_rule_and_fails_on_a_certain_breach_or_a_wrong_fail_mode() {
        let outages = [outage(true)];
        // Six admissions of client-a inside the downtime: 3 + 3, the bound.
        let mut records: Vec<_> = (0..6).map(|k| answered(200, S(101 + k))).collect();
        records.push(answered(429, S(107)));
        let checks = fallback_checks(&records, &plan("local"), &outages, 2);
        assert_eq!(checks.len(), 1);
        assert_eq!(
            checks[0].name,
            "fallback limit limited/client (sliding_window)"
        );
        assert!(checks[0].passed, "{}", checks[0].detail);
        assert!(
            checks[0].detail.contains(
                "in process only: 6 admissions of sliding_window client-a in 5.0 s from 101.0 s (bound 6)"
            ),
            "{}",
            checks[0].detail
        );
        // A seventh is certain: the refusal answered 200 (no quota headers needed).
        records[6] = answered(200, S(107));
        let checks = fallback_checks(&records, &plan("local"), &outages, 2);
        assert!(!checks[0].passed);
        assert!(
            checks[0].detail.contains("in process only: 7 admissions"),
            "{}",
            checks[0].detail
        );
        // A lost answer instead is only possible.
        records[6].record.status = 0;
        records[6].record.admitted = false;
        records[6].record.failure = Some(Failure::Lost);
        let checks = fallback_checks(&records, &plan("local"), &outages, 2);
        assert!(checks[0].passed);
        assert!(
            checks[0]
                .detail
                .contains("possible only if some of the 1 lost"),
            "{}",
            checks[0].detail
        );
        // Failing open is no local limit, whatever the counts.
        let checks = fallback_checks(&records[..1], &plan("open"), &outages, 2);
        assert!(!checks[0].passed);
        assert!(checks[0].detail.contains("fails open, not local"));
    }

    #[test]
    fn across_lost_data_nothing_fails() {
        let mut admissions = burst(S(100), MS(10), 300);
        let t = tightest(&mut admissions, log_of(100), &[outage(false)]);
        assert_eq!(t.keys().copied().collect::<Vec<_>>(), [Class::Unjudged]);
        assert!(t[&Class::Unjudged].over(), "reported, but not a failure");
    }
}
