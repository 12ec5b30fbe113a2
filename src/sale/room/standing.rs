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
    /// The wait for the places ahead, when a rate was measured.
    pub wait: Option<WaitEstimate>,
    /// False when more places are ahead than units are left.
    pub likely: bool,
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
            likely: true,
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
            likely: false,
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

/// Where the joiner with `index` stands.
pub fn standing(situation: &Situation<'_>, index: u64) -> Standing {
    let view = situation.view;
    let now = situation.now_ms;
    if let Some((reason, at)) = closed(situation) {
        return Standing::closed(reason, at, situation);
    }
    let place = view.place_of(index);
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
            likely: false,
            may_return: Some((counters.may_return, counters.may_return_until_ms)),
            ..Standing::new(QueueState::SoldOut, situation)
        };
    }
    // Without Redis no purchase can be made: no pass is handed out either.
    if let (Some(expires), false) = (expires, situation.stale) {
        return Standing {
            place,
            ahead: Some(0),
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
    Standing {
        place: Some(place),
        ahead: Some(ahead),
        wait: Some(WaitEstimate::new(ahead, rate, until_open)),
        likely: view.stock.is_none_or(|stock| (ahead as i64) < stock),
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
        assert!(waiting.likely);
        assert!(!poll(9, now, false, false).likely, "5 ahead, 5 units");
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
        let off = standing(&at(&view, &off, now, false, false), 7);
        assert_eq!(
            (off.state, off.closed),
            (QueueState::Closed, Some((ClosedReason::Off, None)))
        );
        let stale = poll(0, now, false, true);
        assert_eq!(
            (stale.state, stale.pass_expires_ms, stale.stale),
            (QueueState::Waiting, None, true)
        );
        let unplaced = standing(&at(&view, &room, now, false, false), 10);
        assert_eq!(
            (unplaced.state, unplaced.place, unplaced.draws_at_ms),
            (QueueState::Waiting, None, Some(now))
        );
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
            );
            assert_eq!(
                (answer.state, answer.closed, answer.likely),
                (
                    QueueState::Closed,
                    Some((ClosedReason::SoldOut, Some(START + 5_000))),
                    false
                )
            );
        }
    }

    #[test]
    fn a_pending_reservation_keeps_the_room_waiting_when_the_board_says_sold_out() {
        let mut view = view();
        view.pending = 1;
        let answer = standing(&at(&view, &room(), START + 2_000, true, false), 7);
        assert_eq!(answer.state, QueueState::Waiting);
    }
}
