//! The denial cache's part in a decision: consulted before Redis is asked (a refusal
//! that cannot have changed yet is answered again here), taught after (what Redis
//! refused, or filled to the last slot).
//!
//! **Costs.** A denial says a key refuses a request of cost 1 until it ends; a request
//! of any cost is then refused too (it needs at least as much room), so consulting
//! ignores the cost, and answers the cost-1 wait, never longer than Redis's own. Only a
//! refusal of cost 1 is learned: a refused cost of 5 says nothing about a cost of 1.
//! An admission that left its tightest rule at 0 is learned whatever its cost: a
//! script's `remaining` and `next` are counted in hits of cost 1 (backend.rs), so 0
//! means a cost-1 request is refused until `next`.

use std::time::Duration;

use super::backend::{Cost, Decision};
use super::denial::{DenialCache, Probe, Seen};

/// A refusal the denial cache answers: the first denied rule (an index into the keys
/// consulted), its wait, and the longest among the denied rules' (whole ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Denied {
    pub rule: usize,
    pub own_wait_ms: u64,
    pub longest_wait_ms: u64,
}

/// When some key's denial expired: a key like that is probed by one request at a time;
/// the others wait for its answer, at most `patience` (the limiter's timeout), and look
/// again. A live denial found then refuses locally (the first such rule answers, with
/// the longest of their waits, each no later than Redis's own). Returns the probes this
/// request holds, to be settled with Redis's answer. `now_us` is the limiter's clock.
pub(super) async fn consult<'k>(
    denials: &'k DenialCache,
    now_us: impl Fn() -> i64,
    patience: Duration,
    keys: &'k [String],
    generation: u64,
) -> Result<Vec<Probe<'k>>, Denied> {
    if !denials.is_enabled() {
        return Ok(Vec::new());
    }
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let now = now_us();
        let mut refusal: Option<Denied> = None;
        let mut probing = None;
        let mut expired = Vec::new();
        for (rule, key) in keys.iter().enumerate() {
            match denials.seen(key, now, generation) {
                Seen::Refused { wait_us } => {
                    let wait = whole_ms(wait_us);
                    match refusal.as_mut() {
                        Some(r) => r.longest_wait_ms = r.longest_wait_ms.max(wait),
                        None => {
                            refusal = Some(Denied {
                                rule,
                                own_wait_ms: wait,
                                longest_wait_ms: wait,
                            })
                        }
                    }
                }
                Seen::Probing(notify) => {
                    probing.get_or_insert((key, notify));
                }
                Seen::Expired => expired.push(key),
                Seen::Unknown => {}
            }
        }
        if let Some(refusal) = refusal {
            return Err(refusal);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Vec::new()); // waited long enough: just ask Redis
        }
        if let Some((key, notify)) = probing {
            let notified = notify.notified();
            // Registered before looking again, so an answer in between is not missed.
            if denials.is_probing(key, &notify) {
                let _ = tokio::time::timeout_at(deadline, notified).await;
            }
            continue;
        }
        let probes: Vec<Probe<'k>> = expired
            .iter()
            .filter_map(|key| denials.claim(key, now, generation))
            .collect();
        if probes.len() == expired.len() {
            return Ok(probes);
        }
        // Someone claimed one first: drop ours (handing them on) and look again.
    }
}

/// Teaches the denial cache what Redis answered. A refusal is recorded for the
/// refusing rule's key when that rule's cost was 1 (`costs[i]` is rule i's; empty:
/// all 1), and so is an admission that took a rule's last slot, whatever its cost:
/// that key is full until its next slot opens (see the module docs). A probe's key is forgotten only when the
/// answer shows it has room (the tightest rule still had some left, or the probe's
/// rule came before the tightest and so had more); otherwise (another rule refused
/// and its own state is unknown) the next request probes.
pub(super) fn learn(
    denials: &DenialCache,
    decision: &Decision,
    keys: &[String],
    costs: &[Cost],
    probes: Vec<Probe<'_>>,
    started_us: i64,
    generation: u64,
) {
    let (full, wait_ms) = match *decision {
        Decision::Refused {
            rule,
            retry_after_ms,
            ..
        } => {
            let cost_one = costs.get(rule).is_none_or(|&cost| cost == Cost::ONE);
            (cost_one.then_some(rule), retry_after_ms)
        }
        Decision::Admitted {
            tightest,
            remaining,
            next_slot_ms,
            ..
        } => ((remaining <= 0).then_some(tightest), next_slot_ms),
    };
    if let Some(rule) = full {
        denials.insert(
            &keys[rule],
            started_us.saturating_add(wait_ms.max(1).saturating_mul(1000)),
            generation,
        );
    }
    for probe in probes {
        // The tightest rule is the first with the fewest left: an earlier rule has
        // more than it, a later one at least as many.
        let has_room = match *decision {
            Decision::Refused { .. } => false,
            Decision::Admitted {
                tightest,
                remaining,
                ..
            } => remaining > 0 || keys.iter().position(|key| key == probe.key()) < Some(tightest),
        };
        if has_room {
            probe.forget();
        }
    }
}

/// A local wait in whole milliseconds for the headers, rounded up (≥ 1): never later
/// than Redis's own answer, which counts whole milliseconds from an earlier start.
pub(super) fn whole_ms(wait_us: i64) -> u64 {
    (wait_us.max(1) as u64).div_ceil(1000)
}
