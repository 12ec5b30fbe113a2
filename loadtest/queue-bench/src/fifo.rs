//! FIFO order: a `fifo` room on a sale that has started, shoppers joining over time
//! faster than the inlet admits them, each polling (every `refreshIntervalSeconds`
//! unless told) until admitted, passes never used. From what the clients saw, over the
//! whole run, on one instance (whose copy of the room only moves forward):
//! - positions grow with the order of joining: a join answered before another was sent
//!   has the smaller position;
//! - no shopper is admitted before one who joined earlier and was still waiting: once a
//!   poll has shown position `p` admitted, no later poll (sent after that answer came)
//!   shows a smaller position waiting;
//! - the serving position the answers imply (`position - 1 - ahead`) never goes back.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use serde::Serialize;

use crate::behaviour::{everyone, Clicks, Ending, InRoom, Plan};
use crate::crowd::log_in;
use crate::figures::{check, Lines, ScenarioReport};
use crate::seen::{Joined, Polled, State};
use crate::shopper::Run;
use crate::site::{RoomSettings, Site};

#[derive(Debug, Clone)]
pub struct Fifo {
    pub shoppers: u32,
    pub first_user: i64,
    pub first_ip: u32,
    /// Shoppers join at uniformly random moments over this long.
    pub join_over: Duration,
    pub admit_per_second: u32,
    /// Between polls; `None`: what the room says.
    pub poll_every: Option<Duration>,
    pub seed: u64,
}

#[derive(Debug, Serialize)]
pub struct FifoFigures {
    pub shoppers: u32,
    pub joined: u64,
    pub admitted: u64,
    pub polls: u64,
    pub seconds: f64,
    /// Pairs of joins one after the other (the first answered before the second was
    /// sent) checked, and those whose positions were not in that order.
    pub join_pairs_out_of_order: u64,
    pub positions_distinct: bool,
    /// Admitted answers checked against every later poll, and those a later poll
    /// contradicted (a smaller position still waiting).
    pub admitted_answers: u64,
    pub admitted_before_an_earlier_joiner: u64,
    pub first_violation: Option<String>,
    /// Polls whose implied serving position was below one an earlier answer implied.
    pub serving_went_back: u64,
    pub endings: std::collections::BTreeMap<&'static str, u64>,
}

impl Lines for FifoFigures {
    fn lines(&self) -> Vec<String> {
        vec![
            format!(
                "{} shoppers joined over time, {} admitted, {} polls in {:.1} s; endings {:?}",
                self.joined, self.admitted, self.polls, self.seconds, self.endings
            ),
            format!(
                "joins out of order {}, positions distinct {}, admitted answers {}, admitted before an earlier joiner still waiting {}, serving went back {}",
                self.join_pairs_out_of_order,
                self.positions_distinct,
                self.admitted_answers,
                self.admitted_before_an_earlier_joiner,
                self.serving_went_back
            ),
        ]
    }
}

pub async fn run(site: Site, config: Fifo) -> anyhow::Result<ScenarioReport<FifoFigures>> {
    let accounts = log_in(
        &site,
        config.first_user,
        config.first_ip,
        config.shoppers,
        0,
        1,
    )
    .await?;
    let item = site
        .create_item(1_000_000, Utc::now() - chrono::Duration::minutes(1))
        .await?;
    let settings = RoomSettings {
        random: false,
        prequeue_from: None,
        admit_per_second: config.admit_per_second,
        max_active: 1_000_000,
        pass_ttl_secs: 120,
        abandon_after_secs: 60,
    };
    site.set_room(item, &settings).await?;
    site.until_listed(item, true).await?;
    let run = Arc::new(Run::new(site, item, true));
    // Everyone is admitted within the joins and the queue they leave, with a margin.
    let drain = Duration::from_secs_f64(
        f64::from(config.shoppers) / f64::from(config.admit_per_second.max(1)),
    );
    let deadline = run.start + config.join_over + drain + Duration::from_secs(30);
    let how = |join_at| {
        Plan::Room(InRoom {
            join_at,
            poll_every: config.poll_every,
            reaction: None,
            clicks: Clicks {
                tries: 0,
                pause: (Duration::ZERO, Duration::ZERO),
                early_every: Duration::from_secs(1),
                fresh: true,
            },
        })
    };
    let join_over = config.join_over;
    let endings = everyone(&run, &accounts, config.seed, deadline, |_, dice| {
        how(dice.between(Duration::ZERO, join_over))
    })
    .await?;
    let seconds = run.start.elapsed().as_secs_f64();
    let ledger = run.seen.take();

    let joins: Vec<&Joined> = ledger.joins.iter().filter(|j| j.status == 200).collect();
    let (join_pairs_out_of_order, positions_distinct) = join_order(&joins);
    let order = admission_order(&ledger.polled);
    let mut ending_counts = std::collections::BTreeMap::new();
    for (_, ending) in &endings {
        *ending_counts.entry(ending.label()).or_default() += 1u64;
    }
    let admitted = endings
        .iter()
        .filter(|(_, e)| *e == Ending::Admitted)
        .count() as u64;
    let figures = FifoFigures {
        shoppers: config.shoppers,
        joined: joins.len() as u64,
        admitted,
        polls: ledger.polls,
        seconds,
        join_pairs_out_of_order,
        positions_distinct,
        admitted_answers: order.admitted_answers,
        admitted_before_an_earlier_joiner: order.violations,
        first_violation: order.first_violation.clone(),
        serving_went_back: order.serving_went_back,
        endings: ending_counts,
    };
    let checks = vec![
        check(
            "positions grow with the order of joining",
            join_pairs_out_of_order == 0 && positions_distinct && joins.iter().all(|j| j.position.is_some()),
            format!(
                "{} joins, {join_pairs_out_of_order} answered a smaller position than a join answered before them; positions distinct: {positions_distinct}",
                joins.len()
            ),
        ),
        check(
            "nobody admitted before an earlier joiner still waiting",
            order.violations == 0 && order.serving_went_back == 0,
            format!(
                "{} admitted answers, {} contradicted by a later poll of a smaller position still waiting{}; serving went back {} times",
                order.admitted_answers,
                order.violations,
                order.first_violation.map(|v| format!(" (first: {v})")).unwrap_or_default(),
                order.serving_went_back
            ),
        ),
        check(
            "every joiner admitted",
            admitted == u64::from(config.shoppers),
            format!("{admitted} of {} admitted; endings {:?}", config.shoppers, figures.endings),
        ),
    ];
    Ok(ScenarioReport {
        scenario: "fifo order",
        figures,
        checks,
    })
}

/// Joins whose position is not above that of every join answered before they were
/// sent; and whether the positions are all distinct.
fn join_order(joins: &[&Joined]) -> (u64, bool) {
    let mut by_received: Vec<&Joined> = joins.to_vec();
    by_received.sort_by_key(|j| j.received);
    let mut by_sent: Vec<&Joined> = joins.to_vec();
    by_sent.sort_by_key(|j| j.sent);
    let (mut next, mut highest, mut out_of_order) = (0, 0u64, 0);
    for join in by_sent {
        while next < by_received.len() && by_received[next].received < join.sent {
            highest = highest.max(by_received[next].position.unwrap_or(0));
            next += 1;
        }
        if join.position.is_some_and(|p| p <= highest) {
            out_of_order += 1;
        }
    }
    let mut positions: Vec<u64> = joins.iter().filter_map(|j| j.position).collect();
    let count = positions.len();
    positions.sort_unstable();
    positions.dedup();
    (out_of_order, positions.len() == count)
}

struct Order {
    admitted_answers: u64,
    violations: u64,
    first_violation: Option<String>,
    serving_went_back: u64,
}

/// Every admitted answer against the waiting answers sent after it came back; and the
/// implied serving position over time.
fn admission_order(polls: &[Polled]) -> Order {
    let mut waiting: Vec<&Polled> = polls
        .iter()
        .filter(|p| p.state == State::Waiting && p.position.is_some())
        .collect();
    waiting.sort_by_key(|p| p.sent);
    // The smallest waiting position among the polls from i on (by sending time).
    let mut smallest_after = vec![u64::MAX; waiting.len() + 1];
    for i in (0..waiting.len()).rev() {
        smallest_after[i] = smallest_after[i + 1].min(waiting[i].position.unwrap_or(u64::MAX));
    }
    let mut order = Order {
        admitted_answers: 0,
        violations: 0,
        first_violation: None,
        serving_went_back: 0,
    };
    let mut admitted: Vec<&Polled> = polls
        .iter()
        .filter(|p| p.state == State::Admitted && p.position.is_some())
        .collect();
    admitted.sort_by_key(|p| p.received);
    for answer in admitted {
        order.admitted_answers += 1;
        let position = answer.position.unwrap_or(0);
        let from = waiting.partition_point(|w| w.sent <= answer.received);
        if smallest_after[from] < position {
            order.violations += 1;
            if order.first_violation.is_none() {
                let later = waiting[from..]
                    .iter()
                    .find(|w| w.position.is_some_and(|p| p < position));
                order.first_violation = later.map(|w| {
                    format!(
                        "position {position} admitted at {:.3} s, position {} waiting at {:.3} s",
                        answer.received.as_secs_f64(),
                        w.position.unwrap_or(0),
                        w.sent.as_secs_f64()
                    )
                });
            }
        }
    }
    // Serving positions implied by waiting answers: place - ahead. A poll sent after
    // another came back must not imply a smaller one.
    let implied = |p: &Polled| Some(p.position? - 1 - p.ahead?);
    let mut by_received: Vec<&&Polled> = waiting.iter().collect();
    by_received.sort_by_key(|p| p.received);
    let (mut next, mut highest) = (0, 0u64);
    for poll in &waiting {
        while next < by_received.len() && by_received[next].received < poll.sent {
            highest = highest.max(implied(by_received[next]).unwrap_or(0));
            next += 1;
        }
        if implied(poll).is_some_and(|s| s < highest) {
            order.serving_went_back += 1;
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(state: State, position: u64, ahead: u64, sent_ms: u64, received_ms: u64) -> Polled {
        Polled {
            user: position as i64,
            sent: Duration::from_millis(sent_ms),
            received: Duration::from_millis(received_ms),
            state,
            position: Some(position),
            ahead: (state == State::Waiting).then_some(ahead),
            pass: None,
        }
    }

    #[test]
    fn a_smaller_position_waiting_after_a_larger_one_was_admitted_is_a_violation() {
        let fine = [
            poll(State::Admitted, 5, 0, 100, 110),
            poll(State::Waiting, 6, 0, 120, 130),
            // Sent before the admission came back: the copy may have been older.
            poll(State::Waiting, 3, 0, 105, 140),
        ];
        let order = admission_order(&fine);
        assert_eq!((order.admitted_answers, order.violations), (1, 0));
        let wrong = [
            poll(State::Admitted, 5, 0, 100, 110),
            poll(State::Waiting, 3, 0, 120, 130),
        ];
        assert_eq!(admission_order(&wrong).violations, 1);
    }

    #[test]
    fn the_serving_position_must_not_go_back() {
        let polls = [
            poll(State::Waiting, 10, 2, 0, 10),  // serving 7
            poll(State::Waiting, 10, 5, 20, 30), // serving 4
        ];
        assert_eq!(admission_order(&polls).serving_went_back, 1);
    }

    #[test]
    fn joins_answered_earlier_have_smaller_positions() {
        let join = |position, sent_ms, received_ms| Joined {
            sent: Duration::from_millis(sent_ms),
            received: Duration::from_millis(received_ms),
            status: 200,
            position: Some(position),
        };
        let (a, b, c) = (join(1, 0, 10), join(2, 20, 30), join(3, 5, 25));
        assert_eq!(join_order(&[&a, &b, &c]), (0, true));
        let late = join(1, 40, 50);
        assert_eq!(join_order(&[&a, &b, &late]), (1, false));
    }
}
