//! The limits, proven from the ledger alone. Every request's send and receive instants
//! are kept. A limiter breach is reported only when it is certain: `limit + 1`
//! admissions of one key whose first send and last receive lie less than one window
//! apart were necessarily decided inside one window. "Less" by a margin
//! ([`clock_slack`]): the limiter decides on Redis's clock, truncated to milliseconds,
//! which is not the one we measure with. Admissions on both sides of a Redis that lost
//! entries (a SIGKILL, see `outages`) are not judged: the lost entries' admissions are,
//! for every later decision, indistinguishable from an over-admission.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use loadtest_core::client::ip_of;
use loadtest_core::ledger::Record;
use loadtest_core::report::Check;

use crate::config::Limit;
use crate::limits::{Expectations, Expected};
use crate::outages::{class, Class, Outage};

/// How much shorter than the window a span must be for its admissions to be certainly
/// inside one window: 1 ms because the limiter's clock (Redis `TIME`) is truncated to
/// milliseconds (a span of 999.8 ms can cover decisions 1000 ms apart, the first one
/// expired by then), plus 0.1 % of the window for that clock running at another rate
/// than our monotonic one (NTP slews by at most 0.05 %).
pub(crate) fn clock_slack(window: Duration) -> Duration {
    Duration::from_millis(1) + window / 1000
}

/// The first certain breach of `limit` among the requests `counted` (as admissions),
/// grouped by `key`, if any; groups touching an outage of lost data are left out.
fn certain_breach<K: std::hash::Hash + Eq + std::fmt::Display>(
    records: &[Record],
    outages: &[Outage],
    limit: Limit,
    key: impl Fn(&Record) -> K,
    counted: impl Fn(&Record) -> bool,
) -> Option<String> {
    let mut groups: HashMap<K, Vec<(Duration, Duration)>> = HashMap::new();
    for r in records.iter().filter(|r| counted(r)) {
        groups.entry(key(r)).or_default().push((r.sent, r.received));
    }
    let k = limit.count as usize + 1;
    for (key, mut admissions) in groups {
        if admissions.len() < k {
            continue;
        }
        admissions.sort();
        // Sliding maximum of receive instants over k consecutive admissions (by send).
        let mut window: VecDeque<usize> = VecDeque::new();
        for j in 0..admissions.len() {
            while window
                .back()
                .is_some_and(|&b| admissions[b].1 <= admissions[j].1)
            {
                window.pop_back();
            }
            window.push_back(j);
            if j + 1 < k {
                continue;
            }
            let i = j + 1 - k;
            while window.front().is_some_and(|&f| f < i) {
                window.pop_front();
            }
            let last_received = admissions[window[0]].1;
            let span = last_received.saturating_sub(admissions[i].0);
            if span + clock_slack(limit.window) < limit.window
                && class(admissions[i].0, last_received, outages) != Class::Unjudged
            {
                return Some(format!(
                    "{key}: {k} admissions between {:.3} s and {:.3} s, {:.3} s apart (limit {} per {:?})",
                    admissions[i].0.as_secs_f64(),
                    last_received.as_secs_f64(),
                    span.as_secs_f64(),
                    limit.count,
                    limit.window
                ));
            }
        }
    }
    None
}

/// One check per dimension; it fails on a certain breach among the answers. A request
/// whose answer was lost (sent, then the connection broke or timed out) may have been
/// admitted: the breaches that exist only when such requests are counted as admissions
/// are reported in the detail ("possible"), but do not fail the check. On a key the
/// load keeps at its limit (the soak's addresses) every lost answer makes one, so
/// failing on them would fail every run with a killed instance while proving nothing;
/// how many there were is in the detail, for the reader to weigh. Requests that were
/// never sent (no connection) count for nothing. A dimension without a limit to hold it
/// to (see `limits`) passes, and its detail says why it was not judged.
pub(crate) fn limit_checks(
    records: &[Record],
    limits: &Expectations,
    outages: &[Outage],
) -> Vec<Check> {
    let unknown = records
        .iter()
        .filter(|r| r.status == 0 && r.possibly_admitted())
        .count();
    let check = |name: &str, expected: &Expected, key: &dyn Fn(&Record) -> String| {
        let limit = match expected {
            Expected::Limit(limit) => *limit,
            Expected::Unjudged(why) => {
                return Check {
                    name: name.to_string(),
                    passed: true,
                    detail: why.clone(),
                }
            }
        };
        let certain = certain_breach(records, outages, limit, key, |r| r.admitted);
        let possible = match certain {
            Some(_) => None,
            None => certain_breach(records, outages, limit, key, Record::possibly_admitted),
        };
        let detail = match (&certain, &possible) {
            (Some(breach), _) => breach.clone(),
            (None, Some(breach)) => format!(
                "no certain breach; possible only if one of the {unknown} lost answers was an admission: {breach}"
            ),
            (None, None) => format!(
                "no key admitted more than {} per {:?}, even counting the {unknown} lost answers as admissions",
                limit.count, limit.window
            ),
        };
        let detail = if outages.iter().any(|o| !o.kept) {
            format!("{detail} (windows across a Redis that lost data not judged)")
        } else {
            detail
        };
        Check {
            name: name.to_string(),
            passed: certain.is_none(),
            detail,
        }
    };
    vec![
        check("user limit", &limits.user, &|r| format!("user {}", r.user)),
        check("ip limit", &limits.ip, &|r| format!("ip {}", ip_of(r.ip))),
        check("api limit", &limits.api, &|_| "all purchases".to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::summarize;
    use loadtest_core::client::Failure;
    use loadtest_core::report::by_cause;

    /// Three per minute on every dimension.
    fn three_per_minute() -> Expectations {
        let limit = Expected::Limit(Limit {
            count: 3,
            window: Duration::from_secs(60),
        });
        Expectations {
            user: limit.clone(),
            ip: limit.clone(),
            api: limit,
        }
    }

    fn admitted(user: i64, sent_ms: u64, received_ms: u64) -> Record {
        Record {
            target: 0,
            user,
            ip: 0,
            sent: Duration::from_millis(sent_ms),
            received: Duration::from_millis(received_ms),
            status: 200,
            code: None,
            dimension: None,
            admitted: true,
            failure: None,
            order_id: None,
        }
    }

    #[test]
    fn a_breach_is_reported_only_when_certain() {
        let limit = Limit {
            count: 3,
            window: Duration::from_secs(60),
        };
        let by_user = |r: &Record| r.user;
        // Four admissions within 1 s: certain.
        let records: Vec<_> = (0..4).map(|i| admitted(1, i * 100, i * 100 + 50)).collect();
        assert!(certain_breach(&records, &[], limit, by_user, |r| r.admitted).is_some());
        // Four admissions whose first send and last receive are 60 s apart: not certain.
        let records = vec![
            admitted(1, 0, 10),
            admitted(1, 20, 30),
            admitted(1, 40, 50),
            admitted(1, 60_000, 60_010),
        ];
        assert!(certain_breach(&records, &[], limit, by_user, |r| r.admitted).is_none());
        // 1001 admissions of a 1000-per-second limit 999.8 ms apart: the millisecond
        // clock may have put the first and the last 1000 ms apart, so not certain.
        let api = Limit {
            count: 1000,
            window: Duration::from_secs(1),
        };
        let records: Vec<_> = (0..1001)
            .map(|i| {
                let mut r = admitted(1, 0, 0);
                r.sent = Duration::from_micros(i * 999);
                r.received = r.sent + Duration::from_micros(800);
                r
            })
            .collect();
        assert!(certain_breach(&records, &[], api, by_user, |r| r.admitted).is_none());
        let squeezed: Vec<_> = records
            .into_iter()
            .map(|mut r| {
                r.sent /= 2;
                r.received = r.sent + Duration::from_micros(800);
                r
            })
            .collect();
        assert!(certain_breach(&squeezed, &[], api, by_user, |r| r.admitted).is_some());
        // Three admissions are within the limit, and other users do not add up.
        let records: Vec<_> = (0..6)
            .map(|i| admitted(i % 2, i as u64, i as u64 + 1))
            .collect();
        assert!(certain_breach(&records, &[], limit, by_user, |r| r.admitted).is_none());
    }

    #[test]
    fn admissions_across_a_redis_that_lost_data_are_not_judged() {
        let limits = three_per_minute();
        // Redis SIGKILLed at 10 s, back at 12 s: user 1's three admissions before it
        // were lost, and it admitted three more after.
        let lost = Outage {
            kept: false,
            from: Duration::from_secs(10),
            down: Duration::from_secs(10),
            up: Duration::from_secs(12),
            to: Duration::from_secs(14),
        };
        let mut records: Vec<_> = (0..3)
            .map(|i| admitted(1, 9_000 + i * 100, 9_050 + i * 100))
            .collect();
        records.extend((0..3).map(|i| admitted(1, 15_000 + i * 100, 15_050 + i * 100)));
        let user = |outages: &[Outage]| {
            limit_checks(&records, &limits, outages)
                .into_iter()
                .find(|c| c.name == "user limit")
                .expect("a user check")
        };
        assert!(!user(&[]).passed);
        let across = user(&[lost]);
        assert!(across.passed, "{}", across.detail);
        assert!(across
            .detail
            .ends_with("(windows across a Redis that lost data not judged)"));
        // Data kept: the same admissions are a breach.
        assert!(!user(&[Outage { kept: true, ..lost }]).passed);
    }

    #[test]
    fn a_lost_answer_may_be_an_admission_and_a_refused_connection_is_not() {
        let limits = three_per_minute();
        let user_check = |records: &[Record]| {
            limit_checks(records, &limits, &[])
                .into_iter()
                .find(|c| c.name == "user limit")
                .expect("a user check")
        };
        let mut records: Vec<_> = (0..3).map(|i| admitted(1, i * 100, i * 100 + 50)).collect();
        let mut unanswered = admitted(1, 400, 450);
        unanswered.status = 0;
        unanswered.admitted = false;
        unanswered.failure = Some(Failure::Connect);
        records.push(unanswered.clone());
        assert!(user_check(&records).passed, "never sent: did nothing");
        assert!(user_check(&records).detail.contains("even counting"));
        for failure in [Failure::Lost, Failure::Timeout] {
            records[3].failure = Some(failure);
            let check = user_check(&records);
            assert!(check.passed, "not certain: {}", check.detail);
            assert!(
                check.detail.starts_with("no certain breach; possible"),
                "{failure:?} may have been admitted: {}",
                check.detail
            );
        }
        // A fourth answered admission is certain.
        records[3] = admitted(1, 400, 450);
        assert!(!user_check(&records).passed);
        // Causes: a 5xx by its code, no answer by why.
        unanswered.failure = Some(Failure::Timeout);
        records.push(unanswered);
        let mut unavailable = admitted(2, 0, 1);
        unavailable.status = 503;
        unavailable.code = Some("LIMITER_UNAVAILABLE".into());
        records.push(unavailable);
        let causes = by_cause(records.iter());
        assert_eq!(causes.get("503 LIMITER_UNAVAILABLE"), Some(&1));
        assert_eq!(causes.get("error timeout"), Some(&1));
        assert_eq!(causes.len(), 2, "{causes:?}");
        let report = summarize(0, &records, 1.0);
        assert_eq!(
            report.unknown_outcomes, 1,
            "the timeout, not the refused connection"
        );
    }
}
