//! Property test: each Lua script against a small reference model in Rust, over random
//! sequences of callers, clock steps and rule edits. Decisions, remaining counts and
//! retry-after must be identical at every step. The same sequences with the denial cache
//! on: every local answer must be one Redis would give (same admissions; a refusal names
//! a rule the model refuses on, with that rule's exact wait, and never a longer wait).

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use seckill::limiter::backend::Decision;
use seckill::limiter::policy::{KeySource, RuleConfig};
use seckill::limiter::{Algorithm, Rejection};

use crate::limiter_engine::{caller, engine_with_denial_cache, rule};

/// What the model decides, rule by rule.
#[derive(Debug)]
struct Verdict {
    first_refusing: Option<usize>,
    remaining: Vec<i64>,
    retry_after_ms: Vec<i64>,
    /// Admitted: per rule left with 0, ms until it admits again.
    next_slot_ms: Vec<i64>,
}

impl Verdict {
    /// The script's compact reply for this verdict.
    fn decision(&self) -> Decision {
        match self.first_refusing {
            Some(rule) => Decision::Refused {
                rule,
                retry_after_ms: self.retry_after_ms[rule],
                longest_retry_after_ms: self.retry_after_ms.iter().copied().max().unwrap_or(0),
            },
            None => {
                let (tightest, remaining) = self
                    .remaining
                    .iter()
                    .copied()
                    .enumerate()
                    .min_by_key(|&(_, r)| r)
                    .expect("at least one rule");
                Decision::Admitted {
                    tightest,
                    remaining,
                    next_slot_ms: self.next_slot_ms[tightest],
                }
            }
        }
    }
}

/// Two rules: one shared by everyone, one per user.
fn rules() -> Vec<RuleConfig> {
    let mut shared = rule("shared", KeySource::Literal("all".into()), 2_000, 4);
    shared.refill_tokens = Some(1);
    shared.refill_ms = Some(700);
    let mut own = rule("own", KeySource::User, 1_000, 2);
    // 3 tokens per 1000 ms: retry-after needs a rounded-up division.
    own.refill_tokens = Some(3);
    own.refill_ms = Some(1_000);
    vec![shared, own]
}

/// The same rules edited at run time: every limit changed, some up, some down. A bucket
/// keeps its tokens across an edit; a window reads its entries with the new window.
fn edited_rules() -> Vec<RuleConfig> {
    let mut shared = rule("shared", KeySource::Literal("all".into()), 3_100, 3);
    shared.refill_tokens = Some(2);
    shared.refill_ms = Some(1_100);
    let mut own = rule("own", KeySource::User, 700, 3);
    own.refill_tokens = Some(1);
    own.refill_ms = Some(450);
    vec![shared, own]
}

/// Key of rule `i` for `user` in the model.
fn model_key(i: usize, user: i64) -> (usize, i64) {
    if i == 0 {
        (0, 0)
    } else {
        (1, user)
    }
}

#[derive(Default)]
struct SlidingModel {
    log: HashMap<(usize, i64), Vec<i64>>,
}

impl SlidingModel {
    fn decide(&mut self, rules: &[RuleConfig], user: i64, now: i64) -> Verdict {
        let n = rules.len();
        let (mut remaining, mut retry, mut first) = (vec![0; n], vec![0; n], None);
        for (i, r) in rules.iter().enumerate() {
            let (w, t) = (r.window_ms as i64, r.threshold as i64);
            let mut live: Vec<i64> = self
                .log
                .get(&model_key(i, user))
                .map(|v| v.iter().copied().filter(|&s| s > now - w).collect())
                .unwrap_or_default();
            live.sort();
            let count = live.len() as i64;
            if count >= t {
                first.get_or_insert(i);
                retry[i] = (live[(count - t) as usize] + w - now).max(1);
            } else {
                remaining[i] = t - count;
            }
        }
        if first.is_some() {
            return Verdict {
                first_refusing: first,
                remaining,
                retry_after_ms: retry,
                next_slot_ms: vec![0; n],
            };
        }
        let mut next_slot = vec![0; n];
        for (i, r) in rules.iter().enumerate() {
            let (w, t) = (r.window_ms as i64, r.threshold as i64);
            let entry = self.log.entry(model_key(i, user)).or_default();
            entry.retain(|&s| s > now - w);
            entry.push(now);
            remaining[i] -= 1;
            if remaining[i] == 0 {
                // Full again: the threshold-th newest entry must expire first.
                next_slot[i] = (entry[entry.len() - t as usize] + w - now).max(1);
            }
        }
        Verdict {
            first_refusing: None,
            remaining,
            retry_after_ms: retry,
            next_slot_ms: next_slot,
        }
    }
}

/// Per key: the level, its time, and the `refill_ms` the level is scaled by.
#[derive(Default)]
struct BucketModel {
    state: HashMap<(usize, i64), (i64, i64, i64)>,
}

impl BucketModel {
    fn decide(&mut self, rules: &[RuleConfig], user: i64, now: i64) -> Verdict {
        let n = rules.len();
        let (mut remaining, mut retry, mut first, mut levels) =
            (vec![0; n], vec![0; n], None, vec![0; n]);
        for (i, r) in rules.iter().enumerate() {
            let (cap, rt, rms) = (
                r.threshold as i64,
                r.refill_tokens.unwrap() as i64,
                r.refill_ms.unwrap() as i64,
            );
            let full = cap * rms;
            let level = match self.state.get(&model_key(i, user)) {
                None => full,
                Some(&(level, at, scale)) => {
                    // The same tokens in this rule's scale, rounded down to a unit.
                    let level = level / scale * rms + level % scale * rms / scale;
                    (level + (now - at).max(0) * rt).min(full)
                }
            };
            levels[i] = level;
            if level < rms {
                first.get_or_insert(i);
                retry[i] = (rms - level + rt - 1) / rt;
            } else {
                remaining[i] = level / rms;
            }
        }
        if first.is_some() {
            return Verdict {
                first_refusing: first,
                remaining,
                retry_after_ms: retry,
                next_slot_ms: vec![0; n],
            };
        }
        let mut next_slot = vec![0; n];
        for (i, r) in rules.iter().enumerate() {
            let (rt, rms) = (r.refill_tokens.unwrap() as i64, r.refill_ms.unwrap() as i64);
            let level = levels[i] - rms;
            self.state.insert(model_key(i, user), (level, now, rms));
            remaining[i] = level / rms;
            if remaining[i] == 0 {
                next_slot[i] = (rms - level + rt - 1) / rt;
            }
        }
        Verdict {
            first_refusing: None,
            remaining,
            retry_after_ms: retry,
            next_slot_ms: next_slot,
        }
    }
}

/// The limiter's answer in the script's terms (a local refusal has no "longest"
/// beyond what the cache knows, so it is checked separately).
fn decision_of(result: &Result<seckill::limiter::Admission, Rejection>) -> (Decision, bool) {
    match result {
        Ok(admission) => {
            let quota = admission.quota_left.expect("decided by Redis");
            let decision = Decision::Admitted {
                tightest: quota.rule,
                remaining: quota.remaining,
                next_slot_ms: quota.next_slot_ms,
            };
            (decision, false)
        }
        Err(Rejection::Refused(refusal)) => {
            let decision = Decision::Refused {
                rule: refusal.rule,
                retry_after_ms: refusal.own_wait_ms as i64,
                longest_retry_after_ms: refusal.longest_wait_ms as i64,
            };
            (decision, refusal.local)
        }
        Err(other) => panic!("limiter failed: {other:?}"),
    }
}

fn run_against_model(algorithm: Algorithm, denial_cache_slots: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    // Each step: which of three users asks, after how many ms (0 = same millisecond),
    // and whether the rules are edited (to the other set) first.
    let steps = prop::collection::vec(
        (
            1i64..=3,
            prop_oneof![Just(0i64), 0i64..400, 400i64..2_500],
            prop::bool::weighted(0.1),
        ),
        1..40,
    );
    runner
        .run(&steps, |steps| {
            runtime.block_on(async {
                let rule_sets = [rules(), edited_rules()];
                let mut rules = &rule_sets[0];
                let engine =
                    engine_with_denial_cache(algorithm, rules.clone(), denial_cache_slots).await;
                let mut sliding = SlidingModel::default();
                let mut bucket = BucketModel::default();
                for (step, &(user, dt, edit)) in steps.iter().enumerate() {
                    if edit {
                        rules = &rule_sets[usize::from(rules == &rule_sets[0])];
                        engine.set_rules(algorithm, rules.clone());
                    }
                    engine.clock.advance_ms(dt);
                    let now = engine.clock.now_ms();
                    let expected = match algorithm {
                        Algorithm::SlidingWindow => sliding.decide(rules, user, now),
                        Algorithm::TokenBucket => bucket.decide(rules, user, now),
                    };
                    let (actual, local) = decision_of(&engine.check(&caller(user)).await);
                    let context = format!("step {step} (user {user}, +{dt} ms, edit {edit})");
                    if !local {
                        prop_assert_eq!(&actual, &expected.decision(), "{}", context);
                        continue;
                    }
                    prop_assert!(denial_cache_slots > 0, "a local answer with the cache off");
                    let Decision::Refused {
                        rule,
                        retry_after_ms,
                        longest_retry_after_ms,
                    } = actual
                    else {
                        unreachable!("the cache only refuses")
                    };
                    let model_wait = expected.retry_after_ms[rule];
                    let model_longest = expected.retry_after_ms.iter().copied().max().unwrap_or(0);
                    prop_assert!(
                        model_wait > 0,
                        "{}: the model admits on rule {}",
                        context,
                        rule
                    );
                    prop_assert_eq!(retry_after_ms, model_wait, "{}", context);
                    prop_assert!(longest_retry_after_ms <= model_longest, "{}", context);
                }
                Ok(())
            })
        })
        .unwrap();
}

#[test]
fn sliding_window_script_matches_the_reference_model() {
    run_against_model(Algorithm::SlidingWindow, 0);
}

#[test]
fn token_bucket_script_matches_the_reference_model() {
    run_against_model(Algorithm::TokenBucket, 0);
}

#[test]
fn sliding_window_with_the_denial_cache_answers_as_redis_would() {
    run_against_model(Algorithm::SlidingWindow, 64);
}

#[test]
fn token_bucket_with_the_denial_cache_answers_as_redis_would() {
    run_against_model(Algorithm::TokenBucket, 64);
}
