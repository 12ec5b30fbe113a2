//! Property test: each algorithm's Lua script against a small reference model in Rust,
//! over random sequences of callers, clock steps, rule edits, two callers racing, and
//! requests with a cost per rule (asked through `Limiter::ask`, as the edge asks: 1 to
//! beyond every rule's quota), whose answers also carry each rule's remaining.
//! Decisions, remaining counts, retry-after, the shaper's delay, the near-limit and
//! shadow-refusal counts must be identical at every step (a race: identical to one of
//! the two orders). The same sequences with the denial cache on: every local answer
//! must be one Redis would give (same admissions; a refusal names a rule the model
//! refuses on, with that rule's exact wait, and never a longer wait).
//!
//! Each model keeps its algorithm's state per key and answers two questions: what a
//! request would get now ([`Look`]), and how an admission changes the state. What is
//! common to every algorithm (all-or-nothing, the first refusing rule, the tightest
//! rule, shadow rules deciding only what the enforced rules admitted) is written once,
//! in [`decide`].

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use seckill::limiter::backend::Decision;
use seckill::limiter::policy::{KeySource, RuleConfig};
use seckill::limiter::{Algorithm, Rejection};

use crate::limiter_engine::{caller, engine_with_denial_cache, rule, Engine};

/// A rule's state is kept per (rule index, user); a literal rule's user is 0.
type Key = (usize, i64);

fn model_key(rules: &[RuleConfig], i: usize, user: i64) -> Key {
    match rules[i].key {
        KeySource::Literal(_) => (i, 0),
        _ => (i, user),
    }
}

/// What one rule would answer a request now, before it is recorded.
#[derive(Debug, Clone, Copy)]
enum Look {
    /// Admits; `left` = requests it would still admit after this one, `near` = this one
    /// leaves it above 80 % of its quota, `delay_ms` = the shaper's wait (else 0).
    Admits {
        left: i64,
        near: bool,
        delay_ms: i64,
    },
    /// Refuses for this many ms.
    Waits(i64),
}

/// Every model answers for a request of `cost` hits under the rule.
trait Model: Default + Clone {
    fn look(&self, rule: &RuleConfig, key: Key, now: i64, cost: i64) -> Look;
    /// Records an admission of `cost` hits that the request's answer holds
    /// `departure_ms` (the shaper's; every other algorithm ignores it).
    fn record(&mut self, rule: &RuleConfig, key: Key, now: i64, departure_ms: i64, cost: i64);
}

/// What a check yields, as the model predicts it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    decision: Decision,
    /// Per rule: 1 when the admission left it near its limit.
    near: Vec<u64>,
    /// Per rule: 1 when it is a shadow rule that would have refused.
    shadow: Vec<u64>,
    /// After an admission, what each rule has left (a shadow rule's as if enforced, 0
    /// where it would have refused); empty after a refusal, or where not asked.
    remaining: Vec<i64>,
}

/// The decision of every rule for `user` at `now`, `costs[i]` hits under rule `i`, and
/// the state it leaves.
fn decide<M: Model>(
    model: &mut M,
    rules: &[RuleConfig],
    user: i64,
    now: i64,
    costs: &[i64],
) -> Answer {
    let n = rules.len();
    let enforced = rules.iter().filter(|r| !r.shadow).count();
    let key = |i| model_key(rules, i, user);
    let looks: Vec<Look> = (0..enforced)
        .map(|i| model.look(&rules[i], key(i), now, costs[i]))
        .collect();
    let waits: Vec<(usize, i64)> = looks
        .iter()
        .enumerate()
        .filter_map(|(i, look)| match *look {
            Look::Waits(wait) => Some((i, wait)),
            Look::Admits { .. } => None,
        })
        .collect();
    let (mut near, mut shadow) = (vec![0; n], vec![0; n]);
    if let Some(&(rule, retry_after_ms)) = waits.first() {
        let longest = waits.iter().map(|&(_, wait)| wait).max().unwrap_or(0);
        let decision = Decision::Refused {
            rule,
            retry_after_ms,
            longest_retry_after_ms: longest,
        };
        return Answer {
            decision,
            near,
            shadow,
            remaining: Vec::new(),
        };
    }
    let mut departure = 0;
    let mut record = vec![false; n];
    for (i, look) in looks.iter().enumerate() {
        if let Look::Admits {
            near: close,
            delay_ms,
            ..
        } = *look
        {
            departure = departure.max(delay_ms);
            near[i] = u64::from(close);
            record[i] = true;
        }
    }
    for i in enforced..n {
        match model.look(&rules[i], key(i), now, costs[i]) {
            Look::Waits(_) => shadow[i] = 1,
            Look::Admits { near: close, .. } => {
                near[i] = u64::from(close);
                record[i] = true;
            }
        }
    }
    for i in (0..n).filter(|&i| record[i]) {
        model.record(&rules[i], key(i), now, departure, costs[i]);
    }
    // What each rule has left now, in hits of cost 1: the next such request's look.
    let left: Vec<(i64, i64)> = (0..n)
        .map(|i| match model.look(&rules[i], key(i), now, 1) {
            _ if !record[i] => (0, 0),
            Look::Admits { left, .. } => (left + 1, 0),
            Look::Waits(wait) => (0, wait),
        })
        .collect();
    let (mut tightest, mut remaining, mut next_slot_ms) = (0, i64::MAX, 0);
    for (i, &(left, next)) in left[..enforced].iter().enumerate() {
        if left < remaining {
            (tightest, remaining, next_slot_ms) = (i, left, next);
        }
    }
    let decision = Decision::Admitted {
        tightest,
        remaining,
        next_slot_ms,
        delay_ms: departure,
        near_limit: 0,
        shadow_refused: 0,
    };
    Answer {
        decision,
        near,
        shadow,
        remaining: left.iter().map(|&(left, _)| left).collect(),
    }
}

/// Rule parameters as the scripts take them (see `limiter::backend::params`).
fn window(r: &RuleConfig) -> i64 {
    r.window_ms as i64
}
fn threshold(r: &RuleConfig) -> i64 {
    r.threshold as i64
}
/// Capacity, refill tokens, refill ms: the bucket's (and GCRA's) parameters.
fn bucket(r: &RuleConfig) -> (i64, i64, i64) {
    (
        r.capacity.unwrap_or(r.threshold) as i64,
        r.refill_tokens.unwrap_or(r.threshold) as i64,
        r.refill_ms.unwrap_or(r.window_ms) as i64,
    )
}
fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1).div_euclid(b)
}

/// The exact log: every admission's time.
#[derive(Default, Clone)]
struct LogModel(HashMap<Key, Vec<i64>>);

impl Model for LogModel {
    fn look(&self, r: &RuleConfig, key: Key, now: i64, cost: i64) -> Look {
        let (w, t) = (window(r), threshold(r));
        let mut live: Vec<i64> = self
            .0
            .get(&key)
            .map(|v| v.iter().copied().filter(|&s| s > now - w).collect())
            .unwrap_or_default();
        live.sort();
        let count = live.len() as i64;
        if cost > t {
            // Never fits: a whole window.
            return Look::Waits(w);
        }
        if count + cost > t {
            // The (threshold - cost + 1)-th newest entry must expire first.
            return Look::Waits((live[(count - (t - cost + 1)) as usize] + w - now).max(1));
        }
        Look::Admits {
            left: t - count - cost,
            near: (count + cost) * 5 > t * 4,
            delay_ms: 0,
        }
    }

    fn record(&mut self, r: &RuleConfig, key: Key, now: i64, _: i64, cost: i64) {
        let entry = self.0.entry(key).or_default();
        entry.retain(|&s| s > now - window(r));
        entry.extend((0..cost).map(|_| now));
    }
}

/// Per key: the level, its time, and the `refill_ms` the level is scaled by.
#[derive(Default, Clone)]
struct BucketModel(HashMap<Key, (i64, i64, i64)>);

impl BucketModel {
    fn level(&self, r: &RuleConfig, key: Key, now: i64) -> i64 {
        let (cap, rt, rms) = bucket(r);
        let full = cap * rms;
        match self.0.get(&key) {
            None => full,
            Some(&(level, at, scale)) => {
                // The same tokens in this rule's scale, rounded down to a unit.
                let level = level / scale * rms + level % scale * rms / scale;
                (level + (now - at).max(0) * rt).min(full)
            }
        }
    }
}

impl Model for BucketModel {
    fn look(&self, r: &RuleConfig, key: Key, now: i64, cost: i64) -> Look {
        let (cap, rt, rms) = bucket(r);
        let level = self.level(r, key, now);
        if level < cost * rms {
            // Above the capacity too: the refill of that many tokens all the same.
            return Look::Waits(ceil_div(cost * rms - level, rt));
        }
        let left = level / rms - cost;
        Look::Admits {
            left,
            near: (cap - left) * 5 > cap * 4,
            delay_ms: 0,
        }
    }

    fn record(&mut self, r: &RuleConfig, key: Key, now: i64, _: i64, cost: i64) {
        let (_, _, rms) = bucket(r);
        let level = self.level(r, key, now) - cost * rms;
        self.0.insert(key, (level, now, rms));
    }
}

/// Per key: the aligned window's start and its count.
#[derive(Default, Clone)]
struct FixedModel(HashMap<Key, (i64, i64)>);

impl FixedModel {
    /// The window in force and its count: a stored window never moves back.
    fn window(&self, r: &RuleConfig, key: Key, now: i64) -> (i64, i64) {
        let w = window(r);
        let aligned = now - now.rem_euclid(w);
        match self.0.get(&key) {
            // Re-anchored to this rule's window (an edit keeps the count).
            Some(&(start, count)) if start - start.rem_euclid(w) >= aligned => {
                (start - start.rem_euclid(w), count)
            }
            _ => (aligned, 0),
        }
    }
}

impl Model for FixedModel {
    fn look(&self, r: &RuleConfig, key: Key, now: i64, cost: i64) -> Look {
        let (w, t) = (window(r), threshold(r));
        let (start, count) = self.window(r, key, now);
        if count + cost > t {
            return Look::Waits((start + w - now).max(1));
        }
        Look::Admits {
            left: t - count - cost,
            near: (count + cost) * 5 > t * 4,
            delay_ms: 0,
        }
    }

    fn record(&mut self, r: &RuleConfig, key: Key, now: i64, _: i64, cost: i64) {
        let (start, count) = self.window(r, key, now);
        self.0.insert(key, (start, count + cost));
    }
}

/// Per key: the current window's start, its count, the previous window's, and the
/// window they were written with.
#[derive(Default, Clone)]
struct CounterModel(HashMap<Key, (i64, i64, i64, i64)>);

impl CounterModel {
    /// (start, cur, prev) in force at `now` under the rule's window.
    fn counts(&self, r: &RuleConfig, key: Key, now: i64) -> (i64, i64, i64) {
        let w = window(r);
        let aligned = now - now.rem_euclid(w);
        let Some(&(mut start, cur, prev, old)) = self.0.get(&key) else {
            return (aligned, 0, 0);
        };
        if old != w {
            // An edit keeps the counts, re-anchored to this rule's window.
            start -= start.rem_euclid(w);
        }
        if start >= aligned {
            (start, cur, prev)
        } else if start == aligned - w {
            (aligned, 0, cur)
        } else {
            (aligned, 0, 0)
        }
    }
}

/// ms until the weighted estimate has room for `cost` more.
fn counter_wait(start: i64, cur: i64, prev: i64, w: i64, t: i64, now: i64, cost: i64) -> i64 {
    if cost > t {
        // Never fits: until both counts stop counting.
        return (start + 2 * w - now).max(1);
    }
    let elapsed = (now - start).max(0);
    if cur + cost <= t {
        let need = w - (t - cur - cost) * w / prev;
        (need - elapsed).max(1)
    } else {
        let need = w - (t - cost) * w / cur;
        ((start + w - now) + need).max(1)
    }
}

impl Model for CounterModel {
    fn look(&self, r: &RuleConfig, key: Key, now: i64, cost: i64) -> Look {
        let (w, t) = (window(r), threshold(r));
        let (start, cur, prev) = self.counts(r, key, now);
        let elapsed = (now - start).max(0);
        let room = t * w - prev * (w - elapsed) - (cur + cost) * w;
        if room < 0 {
            return Look::Waits(counter_wait(start, cur, prev, w, t, now, cost));
        }
        Look::Admits {
            left: room / w,
            near: (t * w - room) * 5 > t * w * 4,
            delay_ms: 0,
        }
    }

    fn record(&mut self, r: &RuleConfig, key: Key, now: i64, _: i64, cost: i64) {
        let (start, cur, prev) = self.counts(r, key, now);
        self.0.insert(key, (start, cur + cost, prev, window(r)));
    }
}

/// Per key: the TAT as whole ms and `part` units of 1/refill_tokens ms, and the
/// refill_tokens it was written with.
#[derive(Default, Clone)]
struct GcraModel(HashMap<Key, (i64, i64, i64)>);

impl GcraModel {
    /// How many units the TAT is ahead of now.
    fn debt(&self, r: &RuleConfig, key: Key, now: i64) -> i64 {
        let (_, rt, _) = bucket(r);
        match self.0.get(&key) {
            None => 0,
            Some(&(tat, part, scale)) => {
                let part = if scale == rt { part } else { part * rt / scale };
                ((tat - now) * rt + part).max(0)
            }
        }
    }
}

impl Model for GcraModel {
    fn look(&self, r: &RuleConfig, key: Key, now: i64, cost: i64) -> Look {
        let (cap, rt, rms) = bucket(r);
        let debt = self.debt(r, key, now);
        let over = debt - (cap - cost) * rms;
        if over > 0 {
            return Look::Waits(ceil_div(over, rt));
        }
        let left = (cap * rms - debt - cost * rms) / rms;
        Look::Admits {
            left,
            near: (cap - left) * 5 > cap * 4,
            delay_ms: 0,
        }
    }

    fn record(&mut self, r: &RuleConfig, key: Key, now: i64, _: i64, cost: i64) {
        let (_, rt, rms) = bucket(r);
        let debt = self.debt(r, key, now) + cost * rms;
        self.0.insert(key, (now + debt / rt, debt % rt, rt));
    }
}

/// Per key: the last departure slot as whole ms and `part` units of 1/threshold ms,
/// and the threshold it was written with.
#[derive(Default, Clone)]
struct ShaperModel(HashMap<Key, (i64, i64, i64)>);

impl ShaperModel {
    /// The next slot, in units of 1/threshold ms from now (0: at once).
    fn slot(&self, r: &RuleConfig, key: Key, now: i64) -> i64 {
        let (w, t) = (window(r), threshold(r));
        match self.0.get(&key) {
            None => 0,
            Some(&(at, part, scale)) => {
                let part = if scale == t { part } else { part * t / scale };
                ((at - now) * t + part + w).max(0)
            }
        }
    }
}

fn max_delay(r: &RuleConfig) -> i64 {
    r.max_delay_ms
        .unwrap_or(seckill::limiter::policy::DEFAULT_MAX_DELAY_MS) as i64
}

impl Model for ShaperModel {
    fn look(&self, r: &RuleConfig, key: Key, now: i64, cost: i64) -> Look {
        let (w, t) = (window(r), threshold(r));
        let bound = max_delay(r) * t;
        let slot = self.slot(r, key, now);
        // The request's last slot: it takes `cost` of them, leaving at the first.
        let last = slot + (cost - 1) * w;
        if last > bound {
            return Look::Waits(ceil_div(last - bound, t));
        }
        Look::Admits {
            left: (bound - last) / w,
            near: last * 5 > bound * 4,
            delay_ms: ceil_div(slot, t),
        }
    }

    fn record(&mut self, r: &RuleConfig, key: Key, now: i64, departure_ms: i64, cost: i64) {
        let (w, t) = (window(r), threshold(r));
        let mut slot = self.slot(r, key, now);
        if ceil_div(slot, t) < departure_ms {
            slot = departure_ms * t;
        }
        slot += (cost - 1) * w;
        self.0.insert(key, (now + slot / t, slot % t, t));
    }
}

/// Every duration of a run (windows, refill times, delays and the clock's steps) is this
/// many times what the rules and steps below say. Redis expires keys on its own clock,
/// the limiter decides on the test's: a key whose window the test's clock has not yet
/// ended must still be there when the next step asks. A script sets a key's TTL to what
/// is left of its window, which at a window's edge was a millisecond or two, and a
/// loaded machine stalled longer than that between two steps (a fixed window's count
/// gone at a `+0 ms` step, its key expired early). Scaled, the clock moves in steps of
/// 60 ms and a window's edge is never closer than that. 60 is as far as the rules can be
/// stretched (the shaper's `maxDelayMs` is at most 60 s); the arithmetic (aligned
/// windows, rounded-up waits, scaled levels) is the same, in larger numbers.
const SCALE: u64 = 60;

/// Three rules: one shared by everyone, one per user, and a tighter per-user shadow rule.
fn rules() -> Vec<RuleConfig> {
    let mut shared = rule("shared", KeySource::Literal("all".into()), 2_000 * SCALE, 4);
    shared.refill_tokens = Some(1);
    shared.refill_ms = Some(700 * SCALE);
    shared.max_delay_ms = Some(600 * SCALE);
    let mut own = rule("own", KeySource::User, 1_000 * SCALE, 2);
    // 3 tokens per 1000 ms: retry-after needs a rounded-up division.
    own.refill_tokens = Some(3);
    own.refill_ms = Some(1_000 * SCALE);
    own.max_delay_ms = Some(300 * SCALE);
    let mut tight = rule("tight", KeySource::User, 1_500 * SCALE, 1);
    tight.refill_ms = Some(900 * SCALE);
    tight.max_delay_ms = Some(200 * SCALE);
    tight.shadow = true;
    vec![shared, own, tight]
}

/// The same rules edited at run time: every limit changed, some up, some down. A bucket
/// keeps its tokens across an edit, GCRA and the shaper their time, a log its entries,
/// the counters their counts (each converts as its script's header says).
fn edited_rules() -> Vec<RuleConfig> {
    let mut shared = rule("shared", KeySource::Literal("all".into()), 3_100 * SCALE, 3);
    shared.refill_tokens = Some(2);
    shared.refill_ms = Some(1_100 * SCALE);
    shared.max_delay_ms = Some(900 * SCALE);
    let mut own = rule("own", KeySource::User, 700 * SCALE, 3);
    own.refill_tokens = Some(1);
    own.refill_ms = Some(450 * SCALE);
    // Policing only: a slot must be free now.
    own.max_delay_ms = Some(0);
    let mut tight = rule("tight", KeySource::User, 2_500 * SCALE, 2);
    tight.refill_ms = Some(1_000 * SCALE);
    tight.max_delay_ms = Some(100 * SCALE);
    tight.shadow = true;
    vec![shared, own, tight]
}

/// The limiter's answer in the script's terms, with the near-limit and shadow counts it
/// added (`before`: the counters before the check); and whether the denial cache gave it.
fn answer_of(
    engine: &Engine,
    result: &Result<seckill::limiter::Admission, Rejection>,
    before: &Counts,
) -> (Answer, bool) {
    let after = Counts::read(engine);
    let near = after
        .near
        .iter()
        .zip(&before.near)
        .map(|(a, b)| a - b)
        .collect();
    let shadow = after
        .shadow
        .iter()
        .zip(&before.shadow)
        .map(|(a, b)| a - b)
        .collect();
    let (decision, local) = match result {
        Ok(admission) => {
            let quota = admission.quota_left.expect("decided by Redis");
            let decision = Decision::Admitted {
                tightest: quota.rule,
                remaining: quota.remaining,
                next_slot_ms: quota.next_slot_ms,
                delay_ms: admission.delayed_ms as i64,
                near_limit: 0,
                shadow_refused: 0,
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
    };
    (
        Answer {
            decision,
            near,
            shadow,
            remaining: Vec::new(),
        },
        local,
    )
}

/// Asks for `user` with `costs[i]` hits under rule `i` through `Limiter::ask` (the
/// edge's entry), on policy `p`'s rules and keys under `generation`: the answer in the
/// script's terms, the near-limit and shadow bits spread per rule, and whether the
/// denial cache gave it.
async fn ask_with_costs(
    engine: &Engine,
    algorithm: Algorithm,
    user: i64,
    costs: &[i64],
    generation: u64,
) -> (Answer, bool) {
    let costs: Vec<u64> = costs.iter().map(|&hits| hits as u64).collect();
    let answer = engine
        .ask(algorithm, &caller(user), &costs, generation)
        .await;
    let n = rules().len();
    let seckill::limiter::Answer::Decided {
        mut decision,
        rule_remaining,
        by,
    } = answer
    else {
        panic!("the limiter failed: {answer:?}");
    };
    let bits = |mask: u32| (0..n).map(|i| u64::from(mask >> i & 1)).collect();
    let (near, shadow) = match &mut decision {
        Decision::Admitted {
            near_limit,
            shadow_refused,
            ..
        } => {
            let spread = (bits(*near_limit), bits(*shadow_refused));
            (*near_limit, *shadow_refused) = (0, 0);
            spread
        }
        Decision::Refused { .. } => (vec![0; n], vec![0; n]),
    };
    (
        Answer {
            decision,
            near,
            shadow,
            remaining: rule_remaining,
        },
        by != seckill::limiter::AnsweredBy::Redis,
    )
}

/// The engine's near-limit and shadow-refusal counters, per rule of [`rules`].
struct Counts {
    near: Vec<u64>,
    shadow: Vec<u64>,
}

impl Counts {
    fn read(engine: &Engine) -> Self {
        let per_rule = |name| {
            ["shared", "own", "tight"]
                .iter()
                .map(|rule| engine.counter(name, &["p", rule]))
                .collect()
        };
        Self {
            near: per_rule("near_limit"),
            shadow: per_rule("shadow_refusals"),
        }
    }
}

fn run_against_model(algorithm: Algorithm, denial_cache_slots: usize) {
    match algorithm {
        Algorithm::SlidingWindow => run::<LogModel>(algorithm, denial_cache_slots),
        Algorithm::TokenBucket => run::<BucketModel>(algorithm, denial_cache_slots),
        Algorithm::FixedWindow => run::<FixedModel>(algorithm, denial_cache_slots),
        Algorithm::SlidingWindowCounter => run::<CounterModel>(algorithm, denial_cache_slots),
        Algorithm::Gcra => run::<GcraModel>(algorithm, denial_cache_slots),
        Algorithm::LeakyBucket => run::<ShaperModel>(algorithm, denial_cache_slots),
    }
}

/// One step of a run: which of three users asks, after how many ms (0 = same
/// millisecond), whether the rules are edited (to the other set) first, whether the
/// next user races it (two checks at once, at the same time), and the request's cost
/// per rule if it has one (asked through `Limiter::ask`; never raced).
type Step = (i64, i64, bool, bool, Option<[i64; 3]>);

fn run<M: Model>(algorithm: Algorithm, denial_cache_slots: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let steps = prop::collection::vec(
        (
            1i64..=3,
            prop_oneof![Just(0i64), 0i64..400, 400i64..2_500],
            prop::bool::weighted(0.1),
            // Races are checked against both orders, which the denial cache's local
            // answers would blur: only with the cache off.
            prop::bool::weighted(if denial_cache_slots == 0 { 0.2 } else { 0.0 }),
            // 1 to past every rule's threshold (at most 4) plus 2, and far above.
            prop::option::weighted(
                0.4,
                prop::array::uniform3(prop_oneof![6 => 1i64..=6, 1 => Just(1_000i64)]),
            ),
        ),
        1..40,
    );
    runner
        .run(&steps, |steps: Vec<Step>| {
            runtime.block_on(async {
                let rule_sets = [rules(), edited_rules()];
                let mut rules = &rule_sets[0];
                let engine =
                    engine_with_denial_cache(algorithm, rules.clone(), denial_cache_slots).await;
                let mut model = M::default();
                // The limiter's generation of rules: each edit is a real change.
                let mut generation = 0;
                let ones = [1; 3];
                for (step, &(user, dt, edit, race, costs)) in steps.iter().enumerate() {
                    if edit {
                        rules = &rule_sets[usize::from(rules == &rule_sets[0])];
                        engine.set_rules(algorithm, rules.clone());
                        generation += 1;
                    }
                    engine.clock.advance_ms(dt * SCALE as i64);
                    let now = engine.clock.now_ms();
                    let context = format!(
                        "step {step} (user {user}, +{dt} ms, edit {edit}, costs {costs:?})"
                    );
                    if race && costs.is_none() {
                        let other = user % 3 + 1;
                        let before = Counts::read(&engine);
                        let (one_caller, other_caller) = (caller(user), caller(other));
                        let (a, b) =
                            tokio::join!(engine.check(&one_caller), engine.check(&other_caller));
                        let (a, _) = answer_of(&engine, &a, &before);
                        let (b, _) = answer_of(&engine, &b, &before);
                        // Either order is a serialization Redis may have run.
                        let mut first = model.clone();
                        let one = (
                            decide(&mut first, rules, user, now, &ones),
                            decide(&mut first, rules, other, now, &ones),
                        );
                        let mut second = model.clone();
                        let two_b = decide(&mut second, rules, other, now, &ones);
                        let two = (decide(&mut second, rules, user, now, &ones), two_b);
                        let signals = |x: &Answer, y: &Answer| {
                            let sum = |p: &[u64], q: &[u64]| {
                                p.iter().zip(q).map(|(p, q)| p + q).collect::<Vec<_>>()
                            };
                            (sum(&x.near, &y.near), sum(&x.shadow, &y.shadow))
                        };
                        // The counters saw both checks: each answer read their total.
                        let seen = (a.near.clone(), a.shadow.clone());
                        let same = |(x, y): &(Answer, Answer)| {
                            x.decision == a.decision
                                && y.decision == b.decision
                                && signals(x, y) == seen
                        };
                        if same(&one) {
                            model = first;
                        } else {
                            prop_assert!(
                                same(&two),
                                "{}: race of users {} and {}: {:?} / {:?}, expected {:?} or {:?}",
                                context,
                                user,
                                other,
                                a,
                                b,
                                one,
                                two
                            );
                            model = second;
                        }
                        continue;
                    }
                    let (actual, expected, local) = match costs {
                        Some(costs) => {
                            let (actual, local) =
                                ask_with_costs(&engine, algorithm, user, &costs, generation).await;
                            (actual, decide(&mut model, rules, user, now, &costs), local)
                        }
                        None => {
                            let before = Counts::read(&engine);
                            let result = engine.check(&caller(user)).await;
                            let mut expected = decide(&mut model, rules, user, now, &ones);
                            // The policies' answer shows the tightest rule only.
                            expected.remaining.clear();
                            let (actual, local) = answer_of(&engine, &result, &before);
                            (actual, expected, local)
                        }
                    };
                    if !local {
                        prop_assert_eq!(&actual, &expected, "{}", context);
                        continue;
                    }
                    prop_assert!(denial_cache_slots > 0, "a local answer with the cache off");
                    let Decision::Refused {
                        rule,
                        retry_after_ms,
                        longest_retry_after_ms,
                    } = actual.decision
                    else {
                        unreachable!("the cache only refuses")
                    };
                    let Decision::Refused { .. } = expected.decision else {
                        return Err(TestCaseError::fail(format!("{context}: the model admits")));
                    };
                    // The model's own wait for that rule at cost 1 (a denial is learned from
                    // cost-1 answers, and refuses every cost): look again, not recording.
                    let Look::Waits(model_wait) =
                        model.look(&rules[rule], model_key(rules, rule, user), now, 1)
                    else {
                        return Err(TestCaseError::fail(format!(
                            "{context}: the model admits on rule {rule}"
                        )));
                    };
                    let Decision::Refused {
                        longest_retry_after_ms: model_longest,
                        ..
                    } = expected.decision
                    else {
                        unreachable!()
                    };
                    prop_assert_eq!(retry_after_ms, model_wait, "{}", context);
                    prop_assert!(longest_retry_after_ms <= model_longest, "{}", context);
                }
                Ok(())
            })
        })
        .unwrap();
}

/// One test per algorithm and cache setting.
macro_rules! against_the_model {
    ($($name:ident: $algorithm:ident, $slots:expr;)*) => {$(
        #[test]
        fn $name() {
            run_against_model(Algorithm::$algorithm, $slots);
        }
    )*};
}

against_the_model! {
    sliding_window_script_matches_the_reference_model: SlidingWindow, 0;
    token_bucket_script_matches_the_reference_model: TokenBucket, 0;
    fixed_window_script_matches_the_reference_model: FixedWindow, 0;
    sliding_window_counter_script_matches_the_reference_model: SlidingWindowCounter, 0;
    gcra_script_matches_the_reference_model: Gcra, 0;
    leaky_bucket_script_matches_the_reference_model: LeakyBucket, 0;
    sliding_window_with_the_denial_cache_answers_as_redis_would: SlidingWindow, 64;
    token_bucket_with_the_denial_cache_answers_as_redis_would: TokenBucket, 64;
    fixed_window_with_the_denial_cache_answers_as_redis_would: FixedWindow, 64;
    sliding_window_counter_with_the_denial_cache_answers_as_redis_would: SlidingWindowCounter, 64;
    gcra_with_the_denial_cache_answers_as_redis_would: Gcra, 64;
    leaky_bucket_with_the_denial_cache_answers_as_redis_would: LeakyBucket, 64;
}

/// docs/limiting.md: "GCRA is the token bucket used as a meter": with the same rules
/// and no edits, the two scripts answer every request alike.
#[test]
fn gcra_decides_every_request_as_the_token_bucket_does() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let steps = prop::collection::vec(
        (1i64..=3, prop_oneof![Just(0i64), 0i64..400, 400i64..2_500]),
        1..60,
    );
    runner
        .run(&steps, |steps| {
            runtime.block_on(async {
                let bucket = engine_with_denial_cache(Algorithm::TokenBucket, rules(), 0).await;
                let gcra = engine_with_denial_cache(Algorithm::Gcra, rules(), 0).await;
                for (step, &(user, dt)) in steps.iter().enumerate() {
                    bucket.clock.advance_ms(dt * SCALE as i64);
                    gcra.clock.advance_ms(dt * SCALE as i64);
                    let before = (Counts::read(&bucket), Counts::read(&gcra));
                    let one = bucket.check(&caller(user)).await;
                    let other = gcra.check(&caller(user)).await;
                    prop_assert_eq!(
                        answer_of(&bucket, &one, &before.0),
                        answer_of(&gcra, &other, &before.1),
                        "step {}",
                        step
                    );
                }
                Ok(())
            })
        })
        .unwrap();
}
