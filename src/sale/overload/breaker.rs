//! The orders breaker: after `failures` order commits in a row failed or timed out,
//! purchases are refused before their reservation for `open_for`; then one purchase, the
//! probe, is let through to commit, and its answer closes the breaker or opens it for
//! another interval.
//!
//! Why consecutive failures and not a failure ratio: a commit failure on a healthy
//! Postgres is rare (a killed connection, a full commit queue), and a Postgres that
//! fails one commit in two is still selling half the units; the breaker is for the
//! Postgres that fails them all (gone, refusing connections, every commit timing out).
//! The price: one failed batch of more than `failures` orders (they fail together)
//! opens it for one interval, until a probe closes it.
//!
//! What counts: a commit that failed (nothing written) or is in doubt (its COMMIT
//! unanswered) is a failure; any answer from Postgres, sold out and already purchased
//! included, is a success. While open or half-open, only the probe's answer counts:
//! the others were let through before the breaker opened.
//!
//! The state moves only when purchases arrive (no timer): an open breaker whose interval
//! is over reads open until the next purchase becomes its probe.

use std::sync::Mutex;
use std::time::Duration;

use prometheus::{IntCounter, IntGauge};
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::vocabulary::BreakerState;

/// When the breaker opens and for how long (settings `orders_breaker_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// Commits in a row that failed or timed out before it opens; 0: never.
    pub failures: u32,
    /// How long it refuses before letting a probe through.
    pub open_for: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { probing: bool },
}

impl State {
    fn word(self) -> BreakerState {
        match self {
            Self::Closed { .. } => BreakerState::Closed,
            Self::Open { .. } => BreakerState::Open,
            Self::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }
}

/// The orders breaker (see the module docs); one per process, so each instance opens on its
/// own failures.
pub struct Breaker {
    settings: BreakerSettings,
    state: Mutex<State>,
    gauge: IntGauge,
    /// `seckill_orders_breaker_transitions_total`, by `BreakerState as usize`.
    transitions: Vec<IntCounter>,
}

/// A purchase the breaker let through. Its commit's answer is reported with
/// [`Clearance::commit_answered`]; a probe that ends without one (its purchase refused
/// before the commit, or dropped) lets the next purchase probe instead.
pub struct Clearance<'a> {
    breaker: &'a Breaker,
    probe: bool,
    answered: bool,
}

impl Breaker {
    /// A closed breaker; its state shows on `seckill_orders_breaker_state`.
    pub fn new(settings: BreakerSettings, metrics: &Metrics) -> Self {
        metrics.orders_breaker_state.set(0);
        Self {
            settings,
            state: Mutex::new(State::Closed { failures: 0 }),
            gauge: metrics.orders_breaker_state.clone(),
            transitions: BreakerState::ALL
                .iter()
                .map(|to| {
                    metrics
                        .orders_breaker_transitions
                        .with_label_values(&[to.label()])
                })
                .collect(),
        }
    }

    /// Lets a purchase through at `now`, or answers how long to wait before trying again.
    pub fn check(&self, now: Instant) -> Result<Clearance<'_>, Duration> {
        let mut state = self.lock();
        let probe = match *state {
            State::Closed { .. } => false,
            State::Open { until } if now < until => return Err(until - now),
            State::Open { .. } | State::HalfOpen { probing: false } => {
                self.enter(&mut state, State::HalfOpen { probing: true });
                true
            }
            // The probe's answer is due within one commit timeout: a second is a fair
            // guess of when it is known.
            State::HalfOpen { probing: true } => return Err(Duration::from_secs(1)),
        };
        Ok(Clearance {
            breaker: self,
            probe,
            answered: false,
        })
    }

    /// Where it stands (readiness, the tests).
    pub fn state(&self) -> BreakerState {
        self.lock().word()
    }

    fn answered(&self, probe: bool, healthy: bool, now: Instant) {
        let mut state = self.lock();
        let open = State::Open {
            until: now + self.settings.open_for,
        };
        match (*state, probe) {
            (State::Closed { .. }, _) if healthy => *state = State::Closed { failures: 0 },
            (State::Closed { failures }, _) => {
                let failures = failures + 1;
                if self.settings.failures > 0 && failures >= self.settings.failures {
                    tracing::warn!(
                        failures,
                        "order commits keep failing: refusing purchases before their reservation"
                    );
                    self.enter(&mut state, open);
                } else {
                    *state = State::Closed { failures };
                }
            }
            (State::HalfOpen { .. }, true) if healthy => {
                tracing::info!("the probe's order committed: purchases go through again");
                self.enter(&mut state, State::Closed { failures: 0 });
            }
            (State::HalfOpen { .. }, true) => self.enter(&mut state, open),
            // Let through before it opened: not evidence about Postgres now.
            _ => {}
        }
    }

    /// A probe ended without its commit's answer: the next purchase probes.
    fn probe_abandoned(&self) {
        let mut state = self.lock();
        if *state == (State::HalfOpen { probing: true }) {
            *state = State::HalfOpen { probing: false };
        }
    }

    fn enter(&self, state: &mut State, next: State) {
        *state = next;
        let word = next.word();
        self.gauge.set(word as i64);
        self.transitions[word as usize].inc();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update leaves a whole state: a panic elsewhere cannot leave half of one.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Clearance<'_> {
    /// The purchase's commit answered at `now`: `healthy` when Postgres answered it
    /// (an order, sold out, already purchased), not when it failed or timed out.
    pub fn commit_answered(&mut self, healthy: bool, now: Instant) {
        self.answered = true;
        self.breaker.answered(self.probe, healthy, now);
    }
}

impl Drop for Clearance<'_> {
    fn drop(&mut self) {
        if self.probe && !self.answered {
            self.breaker.probe_abandoned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN_FOR: Duration = Duration::from_millis(1_000);

    fn breaker(metrics: &Metrics) -> Breaker {
        Breaker::new(
            BreakerSettings {
                failures: 3,
                open_for: OPEN_FOR,
            },
            metrics,
        )
    }

    fn fail(breaker: &Breaker, now: Instant) {
        breaker
            .check(now)
            .expect("let through")
            .commit_answered(false, now);
    }

    fn transitions(metrics: &Metrics, to: &str) -> u64 {
        metrics
            .orders_breaker_transitions
            .with_label_values(&[to])
            .get()
    }

    #[test]
    fn it_opens_after_the_threshold_of_failures_in_a_row_and_refuses_until_the_interval_ends() {
        let metrics = Metrics::new().unwrap();
        let breaker = breaker(&metrics);
        let now = Instant::now();
        fail(&breaker, now);
        fail(&breaker, now);
        // A success starts the count again.
        breaker.check(now).unwrap().commit_answered(true, now);
        fail(&breaker, now);
        fail(&breaker, now);
        assert_eq!(breaker.state(), BreakerState::Closed);
        fail(&breaker, now);
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(metrics.orders_breaker_state.get(), 1);
        assert_eq!(transitions(&metrics, "open"), 1);

        let later = now + Duration::from_millis(400);
        assert_eq!(breaker.check(later).err(), Some(Duration::from_millis(600)));
        assert!(breaker
            .check(now + OPEN_FOR - Duration::from_nanos(1))
            .is_err());
    }

    #[test]
    fn one_probe_per_interval_and_its_success_closes_it() {
        let metrics = Metrics::new().unwrap();
        let breaker = breaker(&metrics);
        let now = Instant::now();
        (0..3).for_each(|_| fail(&breaker, now));
        let after = now + OPEN_FOR;
        let mut probe = breaker.check(after).expect("the probe");
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        assert_eq!(metrics.orders_breaker_state.get(), 2);
        assert!(breaker.check(after).is_err(), "one probe at a time");
        probe.commit_answered(true, after);
        assert_eq!(breaker.state(), BreakerState::Closed);
        assert_eq!(metrics.orders_breaker_state.get(), 0);
        assert!(breaker.check(after).is_ok());
        assert_eq!(
            ["closed", "open", "half_open"].map(|to| transitions(&metrics, to)),
            [1, 1, 1]
        );
    }

    #[test]
    fn a_failed_probe_opens_it_for_another_interval() {
        let metrics = Metrics::new().unwrap();
        let breaker = breaker(&metrics);
        let now = Instant::now();
        (0..3).for_each(|_| fail(&breaker, now));
        let probed = now + OPEN_FOR + Duration::from_millis(5);
        fail(&breaker, probed);
        assert_eq!(breaker.state(), BreakerState::Open);
        assert_eq!(breaker.check(probed).err(), Some(OPEN_FOR));
        assert!(breaker.check(probed + OPEN_FOR).is_ok(), "the next probe");
    }

    #[test]
    fn a_probe_that_never_commits_hands_the_probe_to_the_next_purchase() {
        let metrics = Metrics::new().unwrap();
        let breaker = breaker(&metrics);
        let now = Instant::now();
        (0..3).for_each(|_| fail(&breaker, now));
        let after = now + OPEN_FOR;
        // Refused at its reservation (sold out): dropped unanswered.
        drop(breaker.check(after).expect("the probe"));
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        let mut next = breaker.check(after).expect("the next purchase probes");
        next.commit_answered(true, after);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }

    #[test]
    fn answers_of_purchases_let_through_before_it_opened_do_not_count() {
        let metrics = Metrics::new().unwrap();
        let breaker = breaker(&metrics);
        let now = Instant::now();
        let mut early = breaker.check(now).unwrap();
        let mut late = breaker.check(now).unwrap();
        (0..3).for_each(|_| fail(&breaker, now));
        early.commit_answered(true, now);
        assert_eq!(breaker.state(), BreakerState::Open, "a late success");
        let probe = breaker.check(now + OPEN_FOR).unwrap();
        late.commit_answered(true, now + OPEN_FOR);
        assert_eq!(
            breaker.state(),
            BreakerState::HalfOpen,
            "only the probe decides"
        );
        drop(probe);
    }

    #[test]
    fn with_no_threshold_it_never_opens() {
        let metrics = Metrics::new().unwrap();
        let breaker = Breaker::new(
            BreakerSettings {
                failures: 0,
                open_for: OPEN_FOR,
            },
            &metrics,
        );
        let now = Instant::now();
        (0..1_000).for_each(|_| fail(&breaker, now));
        assert_eq!(breaker.state(), BreakerState::Closed);
    }
}
