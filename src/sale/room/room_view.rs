//! What an instance knows of one item's waiting room: a copy of its Redis state, read by
//! the lobby every [`super::lobby::REFRESH`] (one pipeline per room, however many
//! shoppers poll), from which every poll is answered without a Redis call of its own.
//!
//! The state only grows: joiners get the next index, rounds are sealed one after the
//! other, the serving position only moves forward, and each inlet step is appended to a
//! list. So a refresh reads the counters and the rounds and steps it has not seen yet,
//! and a copy a little old is only a little behind, never wrong.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::estimate::AdmissionRate;
use super::shuffle::Shuffle;
use super::step::Step;

/// A sealed round of the draw: the joiners `first .. first + size` placed on the same
/// numbers by the shuffle of `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// The first join index the round places.
    pub first: u64,
    /// How many joiners it places.
    pub size: u64,
    /// The shuffle's seed (drawn by the instance that sealed it).
    pub seed: u64,
}

impl Round {
    /// `"<first>:<size>:<seed>"`, as `lua/room_seal.lua` records it.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split(':');
        let round = Self {
            first: parts.next()?.parse().ok()?,
            size: parts.next()?.parse().ok()?,
            seed: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(round)
    }

    fn shuffle(&self) -> Shuffle {
        Shuffle::new(self.size, self.seed)
    }
}

/// The room's counters (its state hash).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Join indexes handed out.
    pub joined: u64,
    /// The pre-queue's size, once the sale has started.
    pub pre: Option<u64>,
    /// Whether the pre-queue's round was drawn.
    pub drawn: bool,
    /// Places below this one are placed (their joiner known).
    pub mapped: u64,
    /// The next place the inlet looks at: every place below was admitted or skipped.
    pub serving: u64,
    /// Places admitted so far.
    pub admitted: u64,
    /// Places skipped so far (their shopper gone).
    pub skipped: u64,
    /// Admissions earned and not yet made, as of `credit_at_ms`: `admitPerSecond` earns it,
    /// at most a second's worth.
    pub credit: f64,
    /// When the credit was last written, ms; `None` before the first step.
    pub credit_at_ms: Option<i64>,
    /// Units held by unpaid orders, which may come back (written by the inlet).
    pub may_return: u64,
    /// The last of those orders' payment deadline (ms).
    pub may_return_until_ms: Option<i64>,
    /// When the room closed for good (ms): sold out and no unit can come back
    /// (`lua/room_close.lua`); cleared when the stock is raised.
    pub closed_at_ms: Option<i64>,
}

impl Counters {
    /// Places joined and not yet reached by the serving position: none once the room
    /// closed for good, whose queue ended for everyone in it.
    pub fn waiting(&self) -> u64 {
        if self.closed_at_ms.is_some() {
            return 0;
        }
        self.joined.saturating_sub(self.serving)
    }

    /// The counters from the state hash; a missing or unreadable field reads as its
    /// default.
    pub fn from_hash(hash: &HashMap<String, String>) -> Self {
        let number = |field: &str| hash.get(field).and_then(|v| v.parse::<u64>().ok());
        Self {
            joined: number("joined").unwrap_or(0),
            pre: number("pre"),
            drawn: hash.get("sealed0").is_some_and(|v| v == "1"),
            mapped: number("mapped").unwrap_or(0),
            serving: number("serving").unwrap_or(0),
            admitted: number("admitted").unwrap_or(0),
            skipped: number("skipped").unwrap_or(0),
            credit: hash
                .get("credit")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0),
            credit_at_ms: hash.get("credit_at").and_then(|v| v.parse().ok()),
            may_return: number("may_return").unwrap_or(0),
            may_return_until_ms: hash.get("may_return_until").and_then(|v| v.parse().ok()),
            closed_at_ms: hash.get("closed_at").and_then(|v| v.parse().ok()),
        }
    }
}

/// The whole copy. Rounds and steps are shared between successive copies (they only
/// grow), so a refresh with nothing new copies nothing.
#[derive(Debug, Clone, Default)]
pub struct RoomView {
    /// The state hash.
    pub counters: Counters,
    /// Every sealed round, in order.
    pub rounds: Arc<Vec<Round>>,
    /// Every inlet step, in order.
    pub steps: Arc<Vec<Step>>,
    /// Every skipped place, from the steps.
    pub skipped: Arc<HashSet<u64>>,
    /// The item's stock counter (`None`: missing).
    pub stock: Option<i64>,
    /// Reservations not yet settled: units that may still come back at once.
    pub pending: u64,
    /// Passes admitted, neither used nor expired.
    pub live: u64,
    /// The admission rate measured from the steps when this copy was read (`None`
    /// before the first step).
    pub rate: Option<AdmissionRate>,
}

impl RoomView {
    /// The place of the joiner with `index`, once it is placed.
    pub fn place_of(&self, index: u64) -> Option<u64> {
        if !self.counters.drawn || index >= self.counters.mapped {
            return None;
        }
        Some(match self.round_of(index) {
            Some(round) => round.first + round.shuffle().place(index - round.first),
            None => index,
        })
    }

    /// The joiner at `place`, once it is placed: what the inlet checks for liveness.
    pub fn index_at(&self, place: u64) -> Option<u64> {
        if !self.counters.drawn || place >= self.counters.mapped {
            return None;
        }
        Some(match self.round_of(place) {
            Some(round) => round.first + round.shuffle().entry(place - round.first),
            None => place,
        })
    }

    /// The round holding `number` (a round's indexes and places are the same range);
    /// none: a fifo joiner after the pre-queue, placed at its own index.
    fn round_of(&self, number: u64) -> Option<Round> {
        let after = self.rounds.partition_point(|r| r.first <= number);
        let round = *self.rounds.get(after.checked_sub(1)?)?;
        (number < round.first + round.size).then_some(round)
    }

    /// When `place` was admitted; `None` when it was not reached yet or was skipped.
    pub fn admitted_at_ms(&self, place: u64) -> Option<i64> {
        if place >= self.counters.serving || self.skipped.contains(&place) {
            return None;
        }
        let after = self.steps.partition_point(|s| s.from <= place);
        let step = self.steps.get(after.checked_sub(1)?)?;
        (place < step.to).then_some(step.at_ms)
    }

    /// Whether the inlet passed `place` by (abandoned).
    pub fn was_skipped(&self, place: u64) -> bool {
        place < self.counters.serving && self.skipped.contains(&place)
    }

    /// This view with the counters and the rounds and steps read since, as of `now_ms`.
    pub fn advanced(&self, update: ViewUpdate, now_ms: i64) -> Self {
        let rounds = if update.new_rounds.is_empty() {
            Arc::clone(&self.rounds)
        } else {
            let mut rounds = (*self.rounds).clone();
            rounds.extend(update.new_rounds);
            Arc::new(rounds)
        };
        let (steps, skipped) = if update.new_steps.is_empty() {
            (Arc::clone(&self.steps), Arc::clone(&self.skipped))
        } else {
            let mut skipped = (*self.skipped).clone();
            skipped.extend(
                update
                    .new_steps
                    .iter()
                    .flat_map(|s| s.skipped.iter().copied()),
            );
            let mut steps = (*self.steps).clone();
            steps.extend(update.new_steps);
            (Arc::new(steps), Arc::new(skipped))
        };
        Self {
            counters: update.counters,
            rate: AdmissionRate::measured(&steps, now_ms),
            rounds,
            steps,
            skipped,
            stock: update.stock,
            pending: update.pending,
            live: update.live,
        }
    }
}

/// What one refresh read.
#[derive(Debug, Default)]
pub struct ViewUpdate {
    /// The state hash, read whole.
    pub counters: Counters,
    /// Rounds sealed since the last read.
    pub new_rounds: Vec<Round>,
    /// Steps appended since the last read.
    pub new_steps: Vec<Step>,
    /// The item's stock counter (`None`: missing).
    pub stock: Option<i64>,
    /// Reservations not yet settled.
    pub pending: u64,
    /// Passes admitted, neither used nor expired.
    pub live: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(rounds: Vec<Round>, mapped: u64) -> RoomView {
        RoomView {
            counters: Counters {
                drawn: true,
                mapped,
                joined: mapped,
                ..Default::default()
            },
            rounds: Arc::new(rounds),
            ..Default::default()
        }
    }

    #[test]
    fn places_come_from_the_rounds_and_fifo_joiners_keep_their_index() {
        let view = view(
            vec![Round {
                first: 0,
                size: 10,
                seed: 7,
            }],
            15,
        );
        let mut places: Vec<u64> = (0..10).map(|i| view.place_of(i).unwrap()).collect();
        places.sort_unstable();
        assert_eq!(places, (0..10).collect::<Vec<_>>());
        assert_eq!(view.place_of(12), Some(12));
        assert_eq!(view.place_of(15), None, "not placed yet");
        for index in 0..15 {
            assert_eq!(view.index_at(view.place_of(index).unwrap()), Some(index));
        }
    }

    #[test]
    fn nothing_is_placed_before_the_draw() {
        let mut view = view(Vec::new(), 5);
        view.counters.drawn = false;
        assert_eq!(view.place_of(0), None);
    }

    #[test]
    fn steps_say_when_a_place_was_admitted_and_which_were_skipped() {
        let base = view(Vec::new(), 10);
        let step = |from, to, at_ms, skipped: Vec<u64>| Step {
            from,
            to,
            at_ms,
            skipped,
        };
        let view = base.advanced(
            ViewUpdate {
                counters: Counters {
                    drawn: true,
                    mapped: 10,
                    serving: 6,
                    ..Default::default()
                },
                new_steps: vec![step(0, 3, 100, vec![1]), step(3, 6, 200, vec![])],
                ..Default::default()
            },
            1_000,
        );
        assert_eq!(view.admitted_at_ms(0), Some(100));
        assert_eq!(view.admitted_at_ms(1), None);
        assert!(view.was_skipped(1));
        assert_eq!(view.admitted_at_ms(5), Some(200));
        assert_eq!(view.admitted_at_ms(6), None);
        assert_eq!(
            Round::parse("0:10:18446744073709551615"),
            Some(Round {
                first: 0,
                size: 10,
                seed: u64::MAX
            })
        );
        assert_eq!(Round::parse("0:10"), None);
    }
}
