//! Where a waiting shopper stands: the answer to a poll, computed from the instance's
//! copy of the room ([`RoomView`]) and the join index in the shopper's ticket. No Redis
//! call: this is what makes a crowd of pollers cost no more than the sold-out path.

use super::estimate::{AdmissionRate, WaitEstimate};
use super::room_config::RoomConfig;
use super::room_view::RoomView;
use crate::vocabulary::{ClosedReason, QueueState};

/// What the poll looks at besides the ticket.
pub struct Situation<'a> {
    /// This instance's copy of the room.
    pub view: &'a RoomView,
    /// The copy is older than it should be: Redis did not answer the last refreshes.
    pub stale: bool,
    /// The room's settings.
    pub room: &'a RoomConfig,
    /// The sale's start, in ms since the epoch.
    pub sale_starts_ms: i64,
    /// The sale's end, in ms since the epoch.
    pub sale_ends_ms: i64,
    /// The sold-out board says so (see `sale::sold_out`).
    pub sold_out: bool,
    /// Now, in ms since the epoch.
    pub now_ms: i64,
}

/// The answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Standing {
    /// Waiting, admitted, sold out, expired or closed: what the page shows.
    pub state: QueueState,
    /// The shopper's place (0 is the first), once drawn.
    pub place: Option<u64>,
    /// Places between the serving position and this one.
    pub ahead: Option<u64>,
    /// The wait for the places ahead, when a rate was measured and [`Odds::likely`] is
    /// `Some(true)`: a place past the stock is told no wait.
    pub wait: Option<WaitEstimate>,
    /// Whether a unit is there for the place ([`odds`]).
    pub odds: Odds,
    /// When admitted: the pass's expiry (ms).
    pub pass_expires_ms: Option<i64>,
    /// When sold out: units held by unpaid orders, and their last deadline (ms).
    pub may_return: Option<(u64, Option<i64>)>,
    /// When the place is not drawn yet: the sale's start (pre-queue), or now.
    pub draws_at_ms: Option<i64>,
    /// The copy it was answered from is stale (Redis did not answer the last refreshes).
    pub stale: bool,
    /// When closed: why, and since when (ms) where known.
    pub closed: Option<(ClosedReason, Option<i64>)>,
}

impl Standing {
    fn new(state: QueueState, situation: &Situation<'_>) -> Self {
        Self {
            state,
            place: None,
            ahead: None,
            wait: None,
            odds: Odds::UNKNOWN,
            pass_expires_ms: None,
            may_return: None,
            draws_at_ms: None,
            stale: situation.stale,
            closed: None,
        }
    }

    /// The queue is over for this shopper, for `reason`, since `at_ms` where known.
    pub fn closed(reason: ClosedReason, at_ms: Option<i64>, situation: &Situation<'_>) -> Self {
        Self {
            closed: Some((reason, at_ms)),
            ..Self::new(QueueState::Closed, situation)
        }
    }
}

/// Why the queue is over, if it is: the room off, the sale ended, or sold out for good
/// (`closed_at`, written by the inlet in Redis and read with the counters).
fn closed(situation: &Situation<'_>) -> Option<(ClosedReason, Option<i64>)> {
    if !situation.room.enabled {
        return Some((ClosedReason::Off, None));
    }
    if situation.now_ms >= situation.sale_ends_ms {
        return Some((ClosedReason::Ended, Some(situation.sale_ends_ms)));
    }
    let at = situation.view.counters.closed_at_ms?;
    Some((ClosedReason::SoldOut, Some(at)))
}

/// Whether a unit is there for a place, from the copy's stock: what `likely`,
/// `unitsFree` and `pastStock` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Odds {
    /// `Some(true)` only when the place's rank among the places still waiting is within
    /// the units no live pass holds; `None` when that cannot be known (no place yet, no
    /// stock counter in the copy, a place lost or a room closed).
    pub likely: Option<bool>,
    /// Units left that no live pass holds (`stock − live`, never below 0), as of the copy.
    pub units_free: Option<u64>,
    /// When `likely` is `Some(false)` for a waiting place: how many places past those
    /// units its rank is (1: the first without a unit).
    pub past_stock: Option<u64>,
}

impl Odds {
    /// Nothing known.
    pub const UNKNOWN: Self = Self {
        likely: None,
        units_free: None,
        past_stock: None,
    };
}

/// The odds of the waiting place `place`: the one rule every answer follows, the join's
/// included.
///
/// Its rank counts the places still waiting up to it, itself included: those from the
/// serving position on. Every place below the serving position was admitted or skipped,
/// and none at or past it was (`lua/room_admit.lua` moves the position past each place it
/// decides), so the rank is `place − serving + 1`: skipped places count neither before
/// nor after. The inlet admits in order and never more live passes than units left, so
/// places whose rank is within `stock − live` get a unit whoever ahead of them is
/// skipped; past it, only a unit coming back (a pass that runs out, an order not paid)
/// or a raised stock reaches them. A place below the serving position, admitted, holds
/// its unit through its pass (a stale copy answers it as waiting).
pub fn odds(view: &RoomView, place: u64) -> Odds {
    let Some(stock) = view.stock else {
        return Odds::UNKNOWN;
    };
    let free = stock.saturating_sub(view.live as i64).max(0) as u64;
    let serving = view.counters.serving;
    if place < serving {
        return Odds {
            likely: Some(true),
            units_free: Some(free),
            past_stock: None,
        };
    }
    let rank = place - serving + 1;
    Odds {
        likely: Some(rank <= free),
        units_free: Some(free),
        past_stock: (rank > free).then(|| rank - free),
    }
}

/// Where the joiner with `index` stands. `given`: the place the join's script gave it
/// (`fifo` after the draw places a joiner at its index), which the copy may not show yet;
/// `None` for a poll, whose place comes from the copy alone.
pub fn standing(situation: &Situation<'_>, index: u64, given: Option<u64>) -> Standing {
    let view = situation.view;
    let now = situation.now_ms;
    if let Some((reason, at)) = closed(situation) {
        return Standing::closed(reason, at, situation);
    }
    let place = view.place_of(index).or(given);
    let admitted = place.and_then(|place| view.admitted_at_ms(place));
    // Whole seconds, as the pass's `exp` counts them (see `WaitingRoom::stand`).
    let expires = admitted
        .map(|at| (at + situation.room.pass_ttl.as_millis() as i64).div_euclid(1_000) * 1_000);
    let lost = place.is_some_and(|place| view.was_skipped(place))
        || expires.is_some_and(|expires| now >= expires);
    if lost {
        return Standing {
            place,
            ..Standing::new(QueueState::Expired, situation)
        };
    }
    // Sold out: no unit left and none being bought. The place (and a live pass) is
    // kept: when a unit comes back, the same poll answers waiting or admitted again.
    if situation.sold_out && view.pending == 0 {
        let counters = &view.counters;
        return Standing {
            place,
            odds: Odds {
                likely: Some(false),
                ..Odds::UNKNOWN
            },
            may_return: Some((counters.may_return, counters.may_return_until_ms)),
            ..Standing::new(QueueState::SoldOut, situation)
        };
    }
    // Without Redis no purchase can be made: no pass is handed out either.
    if let (Some(expires), false) = (expires, situation.stale) {
        return Standing {
            place,
            ahead: Some(0),
            odds: Odds {
                likely: Some(true),
                ..Odds::UNKNOWN
            },
            pass_expires_ms: Some(expires),
            ..Standing::new(QueueState::Admitted, situation)
        };
    }
    let Some(place) = place else {
        return Standing {
            draws_at_ms: Some(situation.sale_starts_ms.max(now)),
            ..Standing::new(QueueState::Waiting, situation)
        };
    };
    let ahead = place.saturating_sub(view.counters.serving);
    let rate = view
        .rate
        .unwrap_or_else(|| AdmissionRate::flat(situation.room.admit_per_second.into()));
    let until_open = (situation.sale_starts_ms - now).max(0).div_euclid(1_000) as u64;
    let odds = odds(view, place);
    Standing {
        place: Some(place),
        ahead: Some(ahead),
        wait: (odds.likely == Some(true)).then(|| WaitEstimate::new(ahead, rate, until_open)),
        odds,
        ..Standing::new(QueueState::Waiting, situation)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sale::room::room_view::{Counters, Round};
    use crate::sale::room::step::Step;

    const START: i64 = 1_000_000;
    const END: i64 = 2_000_000;

    fn room() -> RoomConfig {
        RoomConfig {
            enabled: true,
            ..Default::default()
        }
    }

    /// Ten placed (round 0 of size 4 shuffled, then fifo), places 0..3 reached at
    /// START + 1000 with place 2 skipped, 5 units left.
    fn view() -> RoomView {
        RoomView {
            counters: Counters {
                joined: 10,
                pre: Some(4),
                drawn: true,
                mapped: 10,
                serving: 4,
                ..Default::default()
            },
            rounds: Arc::new(vec![Round {
                first: 0,
                size: 4,
                seed: 9,
            }]),
            steps: Arc::new(vec![Step {
                from: 0,
                to: 4,
                at_ms: START + 1_000,
                skipped: vec![2],
            }]),
            skipped: Arc::new([2].into_iter().collect()),
            stock: Some(5),
            ..Default::default()
        }
    }

    fn at<'a>(
        view: &'a RoomView,
        room: &'a RoomConfig,
        now_ms: i64,
        sold_out: bool,
        stale: bool,
    ) -> Situation<'a> {
        Situation {
            view,
            stale,
            room,
            sale_starts_ms: START,
            sale_ends_ms: END,
            sold_out,
            now_ms,
        }
    }

    fn index_at(view: &RoomView, place: u64) -> u64 {
        view.index_at(place).unwrap()
    }

    #[test]
    fn every_state() {
        let (view, room) = (view(), room());
        let now = START + 2_000;
        let poll = |place, now, sold_out, stale| {
            standing(
                &at(&view, &room, now, sold_out, stale),
                index_at(&view, place),
                None,
            )
        };
        let admitted = poll(0, now, false, false);
        assert_eq!(admitted.state, QueueState::Admitted);
        assert_eq!(
            admitted.pass_expires_ms,
            Some(START + 1_000 + 120_000),
            "whole seconds"
        );
        assert_eq!(
            poll(2, now, false, false).state,
            QueueState::Expired,
            "skipped"
        );
        assert_eq!(
            poll(0, START + 1_000 + 120_000, false, false).state,
            QueueState::Expired,
            "pass over"
        );
        let waiting = poll(7, now, false, false);
        assert_eq!(
            (waiting.state, waiting.place, waiting.ahead),
            (QueueState::Waiting, Some(7), Some(3))
        );
        assert_eq!(waiting.odds.likely, Some(true), "rank 4 of 5 units");
        let past = poll(9, now, false, false);
        assert_eq!(
            (past.odds, past.wait),
            (
                Odds {
                    likely: Some(false),
                    units_free: Some(5),
                    past_stock: Some(1),
                },
                None
            ),
            "rank 6 of 5 units"
        );
        let sold_out = poll(7, now, true, false);
        assert_eq!(
            (sold_out.state, sold_out.may_return),
            (QueueState::SoldOut, Some((0, None)))
        );
        let ended = poll(7, END, false, false);
        assert_eq!(
            (ended.state, ended.closed),
            (QueueState::Closed, Some((ClosedReason::Ended, Some(END))))
        );
        let off = RoomConfig {
            enabled: false,
            ..room.clone()
        };
        let off = standing(&at(&view, &off, now, false, false), 7, None);
        assert_eq!(
            (off.state, off.closed),
            (QueueState::Closed, Some((ClosedReason::Off, None)))
        );
        let stale = poll(0, now, false, true);
        assert_eq!(
            (stale.state, stale.pass_expires_ms, stale.stale),
            (QueueState::Waiting, None, true)
        );
        let unplaced = standing(&at(&view, &room, now, false, false), 10, None);
        assert_eq!(
            (unplaced.state, unplaced.place, unplaced.draws_at_ms),
            (QueueState::Waiting, None, Some(now))
        );
        assert_eq!((unplaced.odds, unplaced.wait), (Odds::UNKNOWN, None));
    }

    #[test]
    fn a_room_closed_for_good_answers_closed_sold_out_for_every_place() {
        let mut view = view();
        view.stock = Some(0);
        view.counters.closed_at_ms = Some(START + 5_000);
        for place in [0, 2, 7, 9] {
            let answer = standing(
                &at(&view, &room(), START + 6_000, true, false),
                index_at(&view, place),
                None,
            );
            assert_eq!(
                (answer.state, answer.closed, answer.odds),
                (
                    QueueState::Closed,
                    Some((ClosedReason::SoldOut, Some(START + 5_000))),
                    Odds::UNKNOWN
                )
            );
        }
    }

    #[test]
    fn a_pending_reservation_keeps_the_room_waiting_when_the_board_says_sold_out() {
        let mut view = view();
        view.pending = 1;
        let answer = standing(&at(&view, &room(), START + 2_000, true, false), 7, None);
        assert_eq!(answer.state, QueueState::Waiting);
    }
}

/// The odds against the figures (issue 36) and against a model of random rooms.
#[cfg(test)]
mod odds_tests {
    use std::collections::HashSet;
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::sale::room::room_view::{Counters, Round};
    use crate::sale::room::step::Step;

    const START: i64 = 1_000_000;

    fn room() -> RoomConfig {
        RoomConfig {
            enabled: true,
            ..Default::default()
        }
    }

    /// A fifo room of `joined` places, `serving` of them admitted at START (none
    /// skipped), with `stock` on the counter and `live` passes alive.
    fn fifo(joined: u64, serving: u64, stock: i64, live: u64) -> RoomView {
        RoomView {
            counters: Counters {
                joined,
                drawn: true,
                mapped: joined,
                serving,
                admitted: serving,
                ..Default::default()
            },
            steps: Arc::new(vec![Step {
                from: 0,
                to: serving,
                at_ms: START,
                skipped: Vec::new(),
            }]),
            stock: Some(stock),
            live,
            ..Default::default()
        }
    }

    fn poll(view: &RoomView, index: u64, given: Option<u64>) -> Standing {
        let room = room();
        let situation = Situation {
            view,
            stale: false,
            room: &room,
            sale_starts_ms: START,
            sale_ends_ms: START + 3_600_000,
            sold_out: false,
            now_ms: START + 1_000,
        };
        standing(&situation, index, given)
    }

    fn past(free: u64, by: u64) -> Odds {
        Odds {
            likely: Some(false),
            units_free: Some(free),
            past_stock: Some(by),
        }
    }

    /// 20 units, places 1–20 admitted with their passes alive: the counter still says 20
    /// (a pass holds its unit until used), and places 22–35 were told "likely" with a
    /// 1 s wait. No unit is free: every one of them is past the stock, with no wait.
    #[test]
    fn places_behind_twenty_live_passes_are_past_the_stock() {
        let view = fifo(35, 20, 20, 20);
        for position in 21..=35u64 {
            let answer = poll(&view, position - 1, None);
            assert_eq!(answer.state, QueueState::Waiting);
            assert_eq!(answer.ahead, Some(position - 21));
            assert_eq!(answer.odds, past(0, position - 20), "position {position}");
            assert_eq!(answer.wait, None, "position {position}");
        }
    }

    /// Place 103 with 82 ahead and 17 units left was shown "About 5 s".
    #[test]
    fn eighty_two_ahead_of_seventeen_units_is_sixty_six_past_with_no_wait() {
        let view = fifo(110, 20, 17, 0);
        let answer = poll(&view, 102, None);
        assert_eq!(answer.ahead, Some(82));
        assert_eq!((answer.odds, answer.wait), (past(17, 66), None));
        let within = poll(&view, 36, None);
        assert_eq!(within.odds.likely, Some(true), "rank 17 of 17");
        assert!(within.wait.is_some_and(|w| w.p50.is_some()));
    }

    /// The 100 who joined after the start (places 105–204, one unit left) were told
    /// "likely" on joining: the copy had not seen their joins. The join's place counts
    /// as the poll's would; without one, nothing is promised.
    #[test]
    fn a_join_the_copy_has_not_seen_follows_the_same_rule() {
        let view = fifo(104, 103, 1, 0);
        let next = poll(&view, 103, None);
        assert_eq!((next.place, next.odds.likely), (Some(103), Some(true)));
        for index in 104..204 {
            let joined = poll(&view, index, Some(index));
            assert_eq!(joined.place, Some(index));
            assert_eq!(joined.ahead, Some(index - 103));
            assert_eq!((joined.odds, joined.wait), (past(1, index - 103), None));
            let unplaced = poll(&view, index, None);
            assert_eq!(
                (unplaced.place, unplaced.odds, unplaced.wait),
                (None, Odds::UNKNOWN, None)
            );
        }
    }

    #[test]
    fn without_a_stock_counter_nothing_is_promised() {
        let mut view = fifo(10, 0, 5, 0);
        view.stock = None;
        let answer = poll(&view, 0, None);
        assert_eq!((answer.odds, answer.wait), (Odds::UNKNOWN, None));
        view.stock = Some(-3);
        assert_eq!(poll(&view, 0, None).odds, past(0, 1), "a counter below 0");
    }

    /// A random room as the inlet leaves it: a pre-queue round, rounds of the random
    /// order, fifo joiners after them, some joins not placed yet; places below the
    /// serving position admitted or skipped in steps; some live passes.
    #[derive(Debug, Clone)]
    struct Model {
        rounds: Vec<(u64, u64)>,
        fifo: u64,
        unplaced: u64,
        drawn: bool,
        serving: u64,
        /// Per place below `serving`: skipped, and whether a step ends after it.
        reached: Vec<(bool, bool)>,
        stock: Option<i64>,
        live: u64,
        pending: u64,
        sold_out: bool,
        stale: bool,
        /// Ms after START between two steps, and of now after the last one.
        step_every_ms: i64,
        now_after_ms: i64,
    }

    fn model() -> impl Strategy<Value = Model> {
        (
            prop::collection::vec((1..12u64, any::<u64>()), 0..5),
            0..25u64,
            0..4u64,
            prop::bool::weighted(0.9),
            prop::collection::vec((prop::bool::weighted(0.3), prop::bool::weighted(0.3)), 90),
            0..=90u64,
            prop::option::weighted(0.95, -2..40i64),
            0..30u64,
            (0..3u64, any::<bool>(), prop::bool::weighted(0.1)),
            (0..3_000i64, 0..200_000i64),
        )
            .prop_map(
                |(rounds, fifo, unplaced, drawn, reached, serving, stock, live, flags, times)| {
                    let mapped = rounds.iter().map(|r| r.0).sum::<u64>() + fifo;
                    let serving = serving.min(mapped);
                    Model {
                        rounds,
                        fifo,
                        unplaced,
                        drawn,
                        serving,
                        reached: reached[..serving as usize].to_vec(),
                        stock,
                        live,
                        pending: flags.0,
                        sold_out: flags.1,
                        stale: flags.2,
                        step_every_ms: times.0,
                        now_after_ms: times.1,
                    }
                },
            )
    }

    impl Model {
        fn mapped(&self) -> u64 {
            self.rounds.iter().map(|r| r.0).sum::<u64>() + self.fifo
        }

        fn skipped(&self) -> HashSet<u64> {
            (0..self.serving)
                .filter(|&p| self.reached[p as usize].0)
                .collect()
        }

        fn steps(&self) -> Vec<Step> {
            let mut steps = Vec::new();
            let mut from = 0;
            for place in 0..self.serving {
                let (_, ends) = self.reached[place as usize];
                if ends || place + 1 == self.serving {
                    steps.push(Step {
                        from,
                        to: place + 1,
                        at_ms: START + steps.len() as i64 * self.step_every_ms,
                        skipped: (from..=place)
                            .filter(|&p| self.reached[p as usize].0)
                            .collect(),
                    });
                    from = place + 1;
                }
            }
            steps
        }

        fn now_ms(&self) -> i64 {
            START + self.steps().len() as i64 * self.step_every_ms + self.now_after_ms
        }

        fn view(&self) -> RoomView {
            let mut first = 0;
            let rounds = self
                .rounds
                .iter()
                .map(|&(size, seed)| {
                    let round = Round { first, size, seed };
                    first += size;
                    round
                })
                .collect();
            let mapped = self.mapped();
            let skipped = self.skipped();
            RoomView {
                counters: Counters {
                    joined: mapped + self.unplaced,
                    pre: self.rounds.first().map(|r| r.0),
                    drawn: self.drawn,
                    mapped,
                    serving: self.serving,
                    admitted: self.serving - skipped.len() as u64,
                    skipped: skipped.len() as u64,
                    ..Default::default()
                },
                rounds: Arc::new(rounds),
                steps: Arc::new(self.steps()),
                skipped: Arc::new(skipped),
                stock: self.stock,
                pending: self.pending,
                live: self.live,
                rate: None,
            }
        }

        /// Units no live pass holds.
        fn free(&self) -> Option<u64> {
            self.stock
                .map(|stock| (stock - self.live as i64).max(0) as u64)
        }

        /// The place's rank among the places still waiting (neither admitted nor
        /// skipped), counted from 1; `None` when the place itself is not waiting.
        fn rank(&self, place: u64) -> Option<u64> {
            let skipped = self.skipped();
            let admitted: HashSet<u64> =
                (0..self.serving).filter(|p| !skipped.contains(p)).collect();
            let waiting = |p: &u64| !admitted.contains(p) && !skipped.contains(p);
            waiting(&place).then(|| (0..=place).filter(waiting).count() as u64)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 3_000,
            // A failure prints its smallest input; nothing is written beside the tests.
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        /// Every place of a random room: `likely` is true only within the units no live
        /// pass holds, never before the place is drawn, and the wait comes with it.
        #[test]
        fn likely_never_names_a_place_past_the_free_units(model in model()) {
            let view = model.view();
            let room = room();
            let situation = Situation {
                view: &view,
                stale: model.stale,
                room: &room,
                sale_starts_ms: START,
                sale_ends_ms: START + 3_600_000,
                sold_out: model.sold_out,
                now_ms: model.now_ms(),
            };
            let mapped = model.mapped();
            // Every placed joiner, then the joins not placed yet: fifo ones the join's
            // script placed at their index (the copy has not seen them), random ones not.
            let placed = (0..mapped).map(|place| (view.index_at(place), Some(place), None));
            let unplaced = (mapped..mapped + model.unplaced).flat_map(|index| {
                [(Some(index), Some(index), Some(index)), (Some(index), None, None)]
            });
            for (index, place, given) in placed.chain(unplaced) {
                let index = if model.drawn { index.unwrap() } else { place.unwrap_or(0) };
                let answer = standing(&situation, index, given);
                let odds = answer.odds;
                prop_assert!(answer.wait.is_none() || odds.likely == Some(true), "a wait without odds: {answer:?}");
                if answer.state == QueueState::SoldOut {
                    prop_assert_eq!(odds.likely, Some(false));
                }
                // No place yet: unknown (sold out: no unit for anyone), never true.
                let Some(shown) = answer.place else {
                    prop_assert_ne!(odds.likely, Some(true));
                    prop_assert_eq!((odds.units_free, odds.past_stock), (None, None));
                    continue;
                };
                if model.drawn || given.is_some() {
                    prop_assert_eq!(Some(shown), place);
                }
                if answer.state != QueueState::Waiting {
                    continue;
                }
                match (model.rank(shown), model.free()) {
                    (Some(rank), Some(free)) => {
                        prop_assert_eq!(odds.likely, Some(rank <= free), "rank {} of {} free", rank, free);
                        prop_assert_eq!(odds.units_free, Some(free));
                        prop_assert_eq!(odds.past_stock, (rank > free).then(|| rank - free));
                    }
                    (Some(_), None) => prop_assert_eq!(odds, Odds::UNKNOWN),
                    // Admitted, answered as waiting from a stale copy: its pass holds a unit.
                    (None, _) => {
                        prop_assert!(model.stale && !model.skipped().contains(&shown));
                        prop_assert!(odds.likely != Some(false));
                    }
                }
            }
        }
    }
}
