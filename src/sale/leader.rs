//! One instance at a time: the reconciler and the expiry sweeper each run on whichever
//! instance holds their Redis lock (`<prefix>:<task>:lock`), taken for one period at a
//! time, so a dead leader's lock expires with its period and another takes over.

use std::future::Future;
use std::time::Duration;

use anyhow::Context;

use crate::metrics::RedisPurpose;
use crate::store::RedisStore;

/// Runs `step` every `period` on the instance that holds `task`'s lock for that period;
/// `instance` names this process in the lock.
pub async fn run_led<F, Fut>(
    task: &'static str,
    period: Duration,
    redis: RedisStore,
    instance: String,
    mut step: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let lock = format!("{}:{task}:lock", redis.prefix());
    crate::background::every(task, period, || {
        let leading = take(&redis, &lock, &instance, period);
        let run = step();
        async move {
            if leading.await.with_context(|| format!("{task} lock"))? {
                run.await.with_context(|| task)?;
            }
            Ok(())
        }
    })
    .await
}

/// Takes `lock` for `period` unless another instance holds it.
async fn take(
    redis: &RedisStore,
    lock: &str,
    instance: &str,
    period: Duration,
) -> anyhow::Result<bool> {
    let mut set = redis::cmd("SET");
    set.arg(lock)
        .arg(instance)
        .arg("NX")
        .arg("PX")
        .arg(period.as_millis().max(1) as u64);
    let taken: Option<String> = redis.call(RedisPurpose::Other, &set).await?;
    Ok(taken.is_some())
}
