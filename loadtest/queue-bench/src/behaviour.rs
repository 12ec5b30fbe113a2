//! How shoppers act. In a room: join at their moment, poll (a human every
//! `refreshIntervalSeconds`, each time on a new connection; a bot as often as it likes,
//! on a kept one), and once admitted buy after a reaction time (a human) or at once (a
//! bot), retrying what the limits refuse. Without a room: straight at `POST /seckill`
//! (a bot from just before the start, as often as the limits allow; a human a reaction
//! time after the start, a few times).
//!
//! A shopper whose instance stops answering (no connection) moves to the next one.

use std::time::{Duration, Instant};

use loadtest_core::dice::Dice;
pub use loadtest_core::room::Ending;

use crate::crowd::Account;
use crate::seen::State;
use crate::shopper::{Run, Standing};

/// How a shopper clicks "buy".
#[derive(Debug, Clone, Copy)]
pub struct Clicks {
    /// Attempts at most; a `SALE_NOT_STARTED` answer does not count.
    pub tries: u32,
    /// After a refusal (on top of a 429's own `retryAfterMs`), a server error or a lost
    /// answer: uniform in this range, at least [`MIN_PAUSE`].
    pub pause: (Duration, Duration),
    /// Before the sale's start, the next try this much later.
    pub early_every: Duration,
    /// A new connection per request (a human) or kept connections (a bot).
    pub fresh: bool,
}

/// The least a shopper waits before trying again: nobody retries in a busy loop.
const MIN_PAUSE: Duration = Duration::from_millis(20);

/// How a shopper acts in a room.
#[derive(Debug, Clone, Copy)]
pub struct InRoom {
    /// When to join, from the run's start.
    pub join_at: Duration,
    /// Between polls; `None`: what the room says (`refreshIntervalSeconds`).
    pub poll_every: Option<Duration>,
    /// From seeing the pass to the first click, uniform in this range; `None`: never
    /// buys (the pass stays unused).
    pub reaction: Option<(Duration, Duration)>,
    pub clicks: Clicks,
}

/// How a shopper without a room acts: the first click `first_at` from the run's start.
#[derive(Debug, Clone, Copy)]
pub struct Rush {
    pub first_at: Duration,
    pub clicks: Clicks,
}

/// Sleeps `pause`, unless that passes `deadline`: then sleeps until the deadline and
/// answers false.
async fn rest(pause: Duration, deadline: Instant) -> bool {
    let until = Instant::now() + pause;
    if until >= deadline {
        tokio::time::sleep_until(deadline.into()).await;
        return false;
    }
    tokio::time::sleep_until(until.into()).await;
    true
}

fn next(run: &Run, target: usize) -> usize {
    (target + 1) % run.site.targets.len()
}

/// A shopper in the room, from the join to the purchase (or whatever ends it first).
pub async fn in_room(
    run: &Run,
    who: &Account,
    how: InRoom,
    dice: &mut Dice,
    deadline: Instant,
) -> Ending {
    let fresh = how.clicks.fresh;
    let mut target = who.home;
    if !rest(
        (run.start + how.join_at).saturating_duration_since(Instant::now()),
        deadline,
    )
    .await
    {
        return Ending::Deadline;
    }
    let every = |standing: &Standing| {
        how.poll_every.unwrap_or(Duration::from_secs(
            standing.refresh_interval_seconds.unwrap_or(6),
        ))
    };
    // The join, retried while the room is not open, a limit refuses, or nothing answers.
    let (ticket, mut wait) = loop {
        let answer = run.join(who, target, fresh).await;
        if let Some(standing) = answer.standing() {
            match standing.ticket.clone() {
                Some(ticket) => break (ticket, every(&standing)),
                None => return Ending::GaveUp,
            }
        }
        let pause = match (answer.status, answer.code()) {
            (409, Some("QUEUE_NOT_OPEN")) => Duration::from_millis(200),
            (409, Some("SOLD_OUT")) => return Ending::SoldOut,
            (409, _) => return Ending::Closed,
            (429, _) => answer.retry_after().unwrap_or(Duration::from_secs(1)),
            _ => {
                if answer.unreachable() {
                    target = next(run, target);
                }
                Duration::from_millis(500)
            }
        };
        if !rest(pause.max(MIN_PAUSE), deadline).await {
            return Ending::Deadline;
        }
    };
    loop {
        if !rest(wait, deadline).await {
            return Ending::Deadline;
        }
        let answer = run.poll(who, target, &ticket, fresh).await;
        let Some(standing) = answer.standing() else {
            if answer.unreachable() {
                target = next(run, target);
            }
            continue;
        };
        wait = every(&standing);
        match State::parse(&standing.state) {
            State::Waiting | State::Failed => {}
            State::SoldOut => return Ending::SoldOut,
            State::Expired => return Ending::Expired,
            State::Closed => return Ending::Closed,
            State::Admitted => {
                let Some(reaction) = how.reaction else {
                    return Ending::Admitted;
                };
                // A copy that went stale hands out no pass: poll again.
                let Some(pass) = standing.pass else { continue };
                if !rest(dice.between(reaction.0, reaction.1), deadline).await {
                    return Ending::Deadline;
                }
                return click(
                    run,
                    who,
                    &mut target,
                    Some(&pass),
                    how.clicks,
                    dice,
                    deadline,
                )
                .await;
            }
        }
    }
}

/// A shopper without a room: straight at `POST /seckill` from `first_at`.
pub async fn rush(
    run: &Run,
    who: &Account,
    how: Rush,
    dice: &mut Dice,
    deadline: Instant,
) -> Ending {
    let mut target = who.home;
    let due = (run.start + how.first_at).saturating_duration_since(Instant::now());
    if !rest(due, deadline).await {
        return Ending::Deadline;
    }
    click(run, who, &mut target, None, how.clicks, dice, deadline).await
}

/// Purchase attempts until an answer settles it or `clicks.tries` are spent.
async fn click(
    run: &Run,
    who: &Account,
    target: &mut usize,
    pass: Option<&str>,
    clicks: Clicks,
    dice: &mut Dice,
    deadline: Instant,
) -> Ending {
    let mut tries = 0;
    while tries < clicks.tries {
        let answer = run.buy(who, *target, pass, clicks.fresh).await;
        let pause = dice.between(clicks.pause.0, clicks.pause.1);
        let (wait, counts) = match (answer.status, answer.code()) {
            (200, _) | (409, Some("ALREADY_PURCHASED")) => return Ending::Bought,
            (202, _) => return Ending::Pending,
            (409, Some("SOLD_OUT" | "SALE_ENDED")) => return Ending::SoldOut,
            (409, Some("SALE_NOT_STARTED")) => (clicks.early_every, false),
            (403, _) => return Ending::Expired,
            (429, _) => (answer.retry_after().unwrap_or_default() + pause, true),
            _ => {
                if answer.unreachable() {
                    *target = next(run, *target);
                }
                (pause, true)
            }
        };
        tries += u32::from(counts);
        if !rest(wait.max(MIN_PAUSE), deadline).await {
            return Ending::Deadline;
        }
    }
    Ending::GaveUp
}

/// What one shopper of a crowd does.
#[derive(Debug, Clone, Copy)]
pub enum Plan {
    Room(InRoom),
    Rush(Rush),
}

/// Every account of `accounts` acts on its own task, as `plan` says for it (drawn from
/// its own dice), until it is done or `deadline`; how each ended, by holder.
pub async fn everyone(
    run: &std::sync::Arc<Run>,
    accounts: &[Account],
    seed: u64,
    deadline: Instant,
    plan: impl Fn(&Account, &mut Dice) -> Plan,
) -> anyhow::Result<Vec<(crate::crowd::Holder, Ending)>> {
    let tasks: Vec<_> = accounts
        .iter()
        .map(|who| {
            let mut dice = Dice::new(seed, who.user);
            let plan = plan(who, &mut dice);
            let (run, who) = (std::sync::Arc::clone(run), who.clone());
            tokio::spawn(async move {
                let ending = match plan {
                    Plan::Room(how) => in_room(&run, &who, how, &mut dice, deadline).await,
                    Plan::Rush(how) => rush(&run, &who, how, &mut dice, deadline).await,
                };
                (who.holder, ending)
            })
        })
        .collect();
    let mut endings = Vec::with_capacity(tasks.len());
    for task in tasks {
        endings.push(task.await?);
    }
    Ok(endings)
}
