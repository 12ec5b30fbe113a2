//! The second's record for the history stream ([`super::record`]): what moved in the
//! tally since the last record that reached Redis, the refusal samples, and the minute's
//! heavy hitters once a minute ended; appended by `lua/history_append.lua` in the stats
//! flush's own pipeline (no second writer, one slot).
//!
//! Nothing is lost while the process lives: a record Redis did not take (a failed
//! pipeline) is drafted again, bigger, at the next flush, because the running totals it
//! is the difference of move on only once it was written. What carries over is bounded:
//! the counts by the policies' rules and the catalog's items, the samples by
//! `history.samples_per_second` (more are dropped and counted), the minutes' sketches
//! by [`MINUTES_CARRIED`]. A record that finds the stream at its cap is dropped, counted
//! in `history_dropped{what="record"}`, and its counts are not drafted again.

use std::collections::{BTreeMap, VecDeque};

use super::record::{
    DecisionCount, Hitter, ItemCounts, MinuteSketch, RefusalSample, SecondRecord, WAIT_BUCKETS_SECS,
};
use crate::tally::per_item::ItemField;
use crate::tally::refusals::{MinuteHitters, BLOCK};
use crate::tally::sketch::Monitored;
use crate::tally::{Counted, Tally};

/// Minutes' sketches a failing flush keeps for later records; an older one is dropped.
pub const MINUTES_CARRIED: usize = 3;

/// `DecisionCount::outcome` words besides `pass` and `reject`.
const LOCAL: &str = "local";
const SHADOW: &str = "shadow";
const NEAR: &str = "near";
const FAIL_OPEN: &str = "fail_open";
const BLOCKED: &str = "blocked";

/// A policy's rule and outcome.
type DecisionKey = (String, String, &'static str);

/// The running totals a record is the growth of.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    decisions: BTreeMap<DecisionKey, i64>,
    items: BTreeMap<(i64, ItemField), u64>,
}

impl Totals {
    /// The tally's totals now.
    pub fn read(tally: &Tally) -> Self {
        let mut decisions = BTreeMap::new();
        for (counted, total) in tally.totals() {
            let key = match counted {
                Counted::Decision {
                    policy,
                    rule,
                    decision,
                } => (policy, rule, decision.label()),
                Counted::LocalRefusal { policy, rule } => (policy, rule, LOCAL),
                Counted::ShadowRefusal { policy, rule } => (policy, rule, SHADOW),
                Counted::NearLimit { policy, rule } => (policy, rule, NEAR),
                Counted::FailOpen { policy } => (policy, String::new(), FAIL_OPEN),
                Counted::Blocked { policy } => (policy, String::new(), BLOCKED),
                Counted::Purchase(_) => continue,
            };
            *decisions.entry(key).or_insert(0) += total as i64;
        }
        Self {
            decisions,
            items: tally.items.totals(),
        }
    }
}

/// A record drafted, and the totals it brings [`Recorder`] to once written.
pub struct Draft {
    /// The record.
    pub record: SecondRecord,
    totals: Totals,
}

/// This instance's side of the stream (module docs).
pub struct Recorder {
    instance: String,
    samples_per_second: usize,
    last: Totals,
    /// The last written record's second.
    second: i64,
    /// The minute the tally's sketches are counting.
    minute: i64,
    samples: Vec<RefusalSample>,
    samples_dropped: i64,
    minutes: VecDeque<MinuteSketch>,
}

impl Recorder {
    /// Starts from the tally's totals now, as `instance`, in the minute of `now`.
    pub fn new(instance: String, samples_per_second: usize, tally: &Tally, now: i64) -> Self {
        Self {
            instance,
            samples_per_second,
            last: Totals::read(tally),
            second: 0,
            minute: now.div_euclid(60) * 60,
            samples: Vec::new(),
            samples_dropped: 0,
            minutes: VecDeque::new(),
        }
    }

    /// The record of what moved up to `now` (a unix second), if anything did. Takes the
    /// tally's samples (and, once `now`'s minute is a later one, its sketches) into
    /// this recorder; `dropped_samples` is told how many samples it dropped.
    pub fn draft(
        &mut self,
        tally: &Tally,
        now: i64,
        dropped_samples: impl Fn(u64),
    ) -> Option<Draft> {
        let (taken, dropped) = tally.refusals.take_samples();
        let room = self.samples_per_second.saturating_sub(self.samples.len());
        let kept = taken.len().min(room);
        let over = (taken.len() - kept) as u64 + dropped;
        self.samples
            .extend(taken.into_iter().take(kept).map(|s| RefusalSample {
                at_ms: s.at_ms,
                policy: s.policy,
                rule: s.rule,
                user: s.user,
                ip: Some(s.ip.to_string()),
                item: s.item,
            }));
        if over > 0 {
            dropped_samples(over);
            self.samples_dropped += over as i64;
        }
        let minute = now.div_euclid(60) * 60;
        if minute > self.minute {
            let hitters = tally.refusals.take_minute();
            if !hitters.is_empty() {
                if self.minutes.len() == MINUTES_CARRIED {
                    self.minutes.pop_front();
                }
                self.minutes.push_back(sketch(self.minute, hitters));
            }
            self.minute = minute;
        }
        let totals = Totals::read(tally);
        let record = SecondRecord {
            instance: self.instance.clone(),
            second: now.max(self.second + 1),
            decisions: self.decisions(&totals),
            items: self.items(&totals),
            samples: self.samples.clone(),
            samples_dropped: self.samples_dropped,
            minute: self.minutes.front().cloned(),
        };
        let moved = !record.decisions.is_empty()
            || !record.items.is_empty()
            || !record.samples.is_empty()
            || record.samples_dropped > 0
            || record.minute.is_some();
        moved.then_some(Draft { record, totals })
    }

    /// `draft` reached Redis (appended, or dropped at the cap): its counts are not
    /// drafted again.
    pub fn written(&mut self, draft: Draft) {
        self.last = draft.totals;
        self.second = draft.record.second;
        self.samples.clear();
        self.samples_dropped = 0;
        if draft.record.minute.is_some() {
            self.minutes.pop_front();
        }
    }

    fn decisions(&self, totals: &Totals) -> Vec<DecisionCount> {
        totals
            .decisions
            .iter()
            .filter_map(|((policy, rule, outcome), total)| {
                let key = (policy.clone(), rule.clone(), *outcome);
                let count = total - self.last.decisions.get(&key).copied().unwrap_or(0);
                (count != 0).then(|| DecisionCount {
                    policy: policy.clone(),
                    rule: rule.clone(),
                    outcome: outcome.to_string(),
                    count,
                })
            })
            .collect()
    }

    fn items(&self, totals: &Totals) -> Vec<ItemCounts> {
        let mut items: BTreeMap<i64, ItemCounts> = BTreeMap::new();
        for ((item, field), total) in &totals.items {
            let before = self
                .last
                .items
                .get(&(*item, field.clone()))
                .copied()
                .unwrap_or(0);
            let count = total.saturating_sub(before) as i64;
            if count == 0 {
                continue;
            }
            let counts = items.entry(*item).or_insert_with(|| ItemCounts {
                item: *item,
                ..Default::default()
            });
            match field {
                ItemField::Outcome(outcome) => {
                    counts.outcomes.insert(outcome.label().to_string(), count);
                }
                ItemField::Rejected(rule) => {
                    counts.outcomes.insert(format!("rejected:{rule}"), count);
                }
                ItemField::Joins => counts.room.joins = count,
                ItemField::Admissions => counts.room.admissions = count,
                ItemField::Abandons => counts.room.abandons = count,
                ItemField::Wait(bucket) => {
                    counts.room.waits.resize(WAIT_BUCKETS_SECS.len() + 1, 0);
                    if let Some(cell) = counts.room.waits.get_mut(*bucket) {
                        *cell = count;
                    }
                }
            }
        }
        items.into_values().collect()
    }
}

/// The minute starting at `minute` as the record carries it.
fn sketch(minute: i64, hitters: MinuteHitters) -> MinuteSketch {
    fn listed<K>(list: Vec<Monitored<(K, i64)>>, value: impl Fn(K) -> String) -> Vec<Hitter> {
        list.into_iter()
            .map(|m| Hitter {
                value: value(m.key.0),
                item: m.key.1,
                count: m.count as i64,
                error: m.error as i64,
                dimensions: m
                    .dimensions
                    .into_iter()
                    .map(|(d, c)| (d, c as i64))
                    .collect(),
                others: m.others as i64,
            })
            .collect()
    }
    MinuteSketch {
        minute,
        users: listed(hitters.users, |user| user.to_string()),
        addresses: listed(hitters.addresses, |ip| ip.to_string()),
        join_addresses: listed(hitters.join_addresses, |ip| ip.to_string()),
        join_blocks: listed(hitters.join_blocks, |first| {
            format!("{first}-{}", first + BLOCK - 1)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::Outcome;

    #[test]
    fn a_record_not_written_is_drafted_again_with_what_came_since_and_seconds_never_repeat() {
        let tally = Tally::default();
        let mut recorder = Recorder::new("i1".into(), 10, &tally, 120);
        assert!(
            recorder.draft(&tally, 120, |_| {}).is_none(),
            "nothing moved"
        );
        tally
            .items
            .count(7, |cells| cells.outcome(Outcome::Created));
        let lost = recorder.draft(&tally, 121, |_| {}).expect("a record");
        assert_eq!(lost.record.items[0].outcomes["created"], 1);
        // Redis did not take it: the next draft carries it too.
        tally
            .items
            .count(7, |cells| cells.outcome(Outcome::Created));
        let first = recorder.draft(&tally, 121, |_| {}).expect("a record");
        assert_eq!(first.record.items[0].outcomes["created"], 2);
        assert_eq!(first.record.second, 121);
        recorder.written(first);
        tally.items.count(7, |cells| cells.rejected("user"));
        // A flush in the same wall second takes the next one.
        let next = recorder.draft(&tally, 121, |_| {}).expect("a record");
        assert_eq!(next.record.second, 122);
        assert_eq!(
            next.record.items[0].outcomes,
            [("rejected:user".to_string(), 1)].into()
        );
    }

    #[test]
    fn a_minutes_hitters_go_in_the_first_record_after_it_and_samples_past_the_bound_are_dropped() {
        let tally = Tally::default();
        tally.refusals.configure(1, 100, 8);
        let mut recorder = Recorder::new("i1".into(), 2, &tally, 60);
        let ip: std::net::IpAddr = [10, 0, 0, 1].into();
        for user in 1..=3 {
            tally
                .refusals
                .refused("seckill", "user", Some(user), ip, Some(7));
        }
        let dropped = std::cell::Cell::new(0);
        let draft = recorder
            .draft(&tally, 119, |n| dropped.set(dropped.get() + n))
            .expect("a record");
        assert_eq!(draft.record.samples.len(), 2);
        assert_eq!((draft.record.samples_dropped, dropped.get()), (1, 1));
        assert_eq!(draft.record.minute, None, "the minute has not ended");
        recorder.written(draft);
        let draft = recorder.draft(&tally, 120, |_| {}).expect("a record");
        let minute = draft.record.minute.clone().expect("the minute's hitters");
        assert_eq!(minute.minute, 60);
        assert_eq!(minute.addresses[0].value, "10.0.0.1");
        assert_eq!(minute.addresses[0].count, 3);
        assert_eq!(minute.addresses[0].item, 7);
        assert_eq!(minute.users.len(), 3);
        recorder.written(draft);
        assert!(recorder.draft(&tally, 121, |_| {}).is_none());
    }
}
