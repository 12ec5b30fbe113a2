//! Periodic work beside the server: the catalog and sold-out refresh, the reconciler,
//! the consistency export, the rule and domain watchers ([`watch_version`]), the
//! live-stats flush.
//!
//! Every such task is [`every`]: the first run at once, then one per period; a run that
//! overruns its period delays the next one instead of firing a burst to catch up (a slow
//! Redis must not be answered with more calls), and a failed run is logged and retried
//! at the next tick, never ending the task.
//!
//! Shutdown is dropping the future (`startup::Application::run_until_stopped` does when
//! the server stops), which can happen at any `.await`. So every task here must leave
//! both stores consistent wherever it stops, exactly as it must when the process dies:
//! each step is one atomic script or statement, and the next run (here or on another
//! instance) finishes what one left half done.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Interval, MissedTickBehavior};

/// Runs `step` now and then every `period`, forever; a failure is logged at `warn`
/// with `task` and the error chain.
pub async fn every<F, Fut>(task: &'static str, period: Duration, mut step: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut ticks = Ticks::new(task, period);
    loop {
        ticks.next().await;
        ticks.report(step().await);
    }
}

/// [`every`], and also as soon as `wake` resolves: a change another instance announced
/// is applied at once, the period staying the safety net under a lost announcement. A
/// wake during a run brings the next run forward to that run's end, none is lost.
pub async fn every_or_woken<F, Fut, W, WFut>(
    task: &'static str,
    period: Duration,
    mut wake: W,
    mut step: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
    W: FnMut() -> WFut,
    WFut: Future<Output = ()>,
{
    let mut ticks = Ticks::new(task, period);
    loop {
        tokio::select! {
            () = ticks.next() => {}
            () = wake() => {}
        }
        ticks.report(step().await);
    }
}

/// How often a [`watch_version`] rereads its data while the version cannot be read.
const OUTAGE_RELOAD: Duration = Duration::from_secs(5);

/// How often a [`watch_version`] rereads its data regardless, in case the version key
/// itself was lost.
const FULL_RELOAD: Duration = Duration::from_secs(30);

/// Data stored in Postgres and announced by a version key in Redis, copied into this
/// instance: `version` (the key) is read every `every`, and `reload` runs when it moved
/// (and at the first read), every 30 s regardless, and every 5 s while the version
/// cannot be read (Redis down: a change made during the outage must still apply). The
/// rate-limit rules' watcher and the edge domains' (`edge::domain_store`). Polling
/// rather than pub/sub alone: an instance that missed a message, or Redis restarting,
/// only delays a change.
pub async fn watch_version<V, VFut, R, RFut>(
    task: &'static str,
    every: Duration,
    mut version: V,
    mut reload: R,
) where
    V: FnMut() -> VFut,
    VFut: Future<Output = anyhow::Result<Option<i64>>>,
    R: FnMut() -> RFut,
    RFut: Future<Output = anyhow::Result<()>>,
{
    let mut seen: Option<i64> = None;
    let mut first = true;
    let mut since_reload = Duration::ZERO;
    let mut ticks = Ticks::new(task, every);
    loop {
        ticks.next().await;
        since_reload += every;
        let now = match version().await {
            Ok(now) => now,
            Err(e) => {
                // Every poll while Redis is down: not worth a warning each.
                tracing::debug!(task, error = %format!("{e:#}"), "version unavailable");
                if since_reload >= OUTAGE_RELOAD {
                    let reloaded = reload().await;
                    if reloaded.is_ok() {
                        since_reload = Duration::ZERO;
                    }
                    ticks.report(reloaded);
                }
                continue;
            }
        };
        if first || now != seen || since_reload >= FULL_RELOAD {
            let reloaded = reload().await;
            if reloaded.is_ok() {
                if now != seen {
                    tracing::info!(task, version = ?now, "reloaded after a change");
                }
                seen = now;
                first = false;
                since_reload = Duration::ZERO;
            }
            ticks.report(reloaded);
        }
    }
}

/// The schedule of [`every`], for a task that carries state from one run to the next
/// in its own loop: `loop { ticks.next().await; ticks.report(run(&mut state).await) }`.
pub struct Ticks {
    task: &'static str,
    interval: Interval,
}

impl Ticks {
    /// Ticks every `period` (at least 1 ms); `task` names it in the logs.
    pub fn new(task: &'static str, period: Duration) -> Self {
        let mut interval = tokio::time::interval(period.max(Duration::from_millis(1)));
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { task, interval }
    }

    /// Waits for the next run: at once the first time, then a period after the last
    /// tick (later, never sooner, when a run overran).
    pub async fn next(&mut self) {
        self.interval.tick().await;
    }

    /// Logs a failed run.
    pub fn report(&self, result: anyhow::Result<()>) {
        if let Err(e) = result {
            tracing::warn!(task = self.task, error = %format!("{e:#}"), "background task failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn runs_at_once_then_every_period_and_survives_failures() {
        let runs = std::cell::Cell::new(0u32);
        let task = every("test", Duration::from_secs(1), || {
            runs.set(runs.get() + 1);
            let run = runs.get();
            async move {
                anyhow::ensure!(run.is_multiple_of(2), "odd run");
                Ok(())
            }
        });
        // 0 s, 1 s, 2 s, 3 s: four runs within 3.5 s, failures included.
        let _ = tokio::time::timeout(Duration::from_millis(3500), task).await;
        assert_eq!(runs.get(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_runs_the_step_at_once_and_one_during_a_run_is_not_lost() {
        let wake = tokio::sync::Notify::new();
        let runs = std::cell::Cell::new(0u32);
        // Two wakes before the loop starts waiting: one permit is kept, so one run.
        wake.notify_one();
        wake.notify_one();
        let task = every_or_woken(
            "test",
            Duration::from_secs(10),
            || wake.notified(),
            || {
                runs.set(runs.get() + 1);
                async { Ok(()) }
            },
        );
        // At 0 s the first tick, then the kept wake; no tick before 10 s.
        let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        assert_eq!(runs.get(), 2);
    }
}
