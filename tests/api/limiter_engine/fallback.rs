//! Redis stopped under two instances: a policy failing `local` keeps limiting in
//! process at each instance's share, `open` admits, `closed` refuses; each switches
//! back when Redis returns, and `seckill_limiter_mode` says which way each decided.
//! The counts are the bound `docs/limiter.md` writes down, met exactly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use seckill::limiter::policy::{KeySource, PolicyConfig};
use seckill::limiter::{
    Algorithm, Clock, FailMode, Limiter, LimiterSettings, ManualClock, Rejection, Scope,
};
use seckill::metrics::Metrics;
use seckill::store::RedisStore;

use super::{caller, rule};
use seckill_test_support::{eventually, redis_test_settings, use_own_redis, OwnRedis};

/// The rule every policy here has: 5 per minute per user.
const THRESHOLD: u64 = 5;
const WINDOW_MS: u64 = 60_000;

struct Instance {
    limiter: Arc<Limiter>,
    metrics: Arc<Metrics>,
    beat: tokio::task::JoinHandle<()>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.beat.abort();
    }
}

impl Instance {
    /// `admitted` of `attempts` checks of `policy` for `user`, and whether every
    /// refusal was answered without Redis.
    async fn admitted(&self, policy: &str, user: i64, attempts: u32) -> (u32, bool) {
        let (mut admitted, mut all_local) = (0, true);
        for _ in 0..attempts {
            match self.limiter.check(policy, None, &caller(user)).await {
                Ok(_) => admitted += 1,
                Err(Rejection::Refused(refusal)) => all_local &= refusal.local,
                Err(other) => panic!("{policy}: {other}"),
            }
        }
        (admitted, all_local)
    }

    /// The policy's mode as `seckill_limiter_mode` shows it.
    fn mode(&self, policy: &str) -> String {
        let text = self.metrics.render().expect("metrics render");
        let policy_label = format!("policy=\"{policy}\"");
        text.lines()
            .filter(|line| line.starts_with("seckill_limiter_mode{"))
            .filter(|line| line.contains(&policy_label) && line.ends_with("} 1"))
            .find_map(|line| {
                let mode = line.split("mode=\"").nth(1)?;
                Some(mode.split('"').next()?.to_string())
            })
            .unwrap_or_default()
    }
}

fn settings() -> LimiterSettings {
    let mut policies = BTreeMap::new();
    for (name, fail_mode) in [
        ("local", FailMode::Local),
        ("open", FailMode::Open),
        ("closed", FailMode::Closed),
    ] {
        policies.insert(
            name.to_string(),
            PolicyConfig {
                scope: Scope::Global,
                algorithm: Algorithm::SlidingWindow,
                fail_mode,
                enabled: true,
                rules: vec![rule("user", KeySource::User, WINDOW_MS, THRESHOLD)],
            },
        );
    }
    LimiterSettings {
        policies,
        heartbeat_ms: 50,
        ..LimiterSettings::default()
    }
}

async fn instance(
    store_settings: &seckill::configuration::Settings,
    clock: &ManualClock,
) -> Instance {
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let redis = RedisStore::connect(
        &seckill::startup::redis_options(store_settings),
        Arc::clone(&metrics),
    )
    .await
    .expect("redis");
    let limiter = Arc::new(
        Limiter::new(redis, &settings(), Arc::clone(&metrics))
            .expect("valid policies")
            .with_clock(Clock::Manual(clock.clone())),
    );
    let beat = tokio::spawn(Arc::clone(&limiter).beat());
    Instance {
        limiter,
        metrics,
        beat,
    }
}

#[tokio::test]
async fn each_fail_mode_over_two_instances_through_an_outage_and_back() {
    let mut redis = OwnRedis::start().await;
    let mut store_settings = redis_test_settings();
    use_own_redis(&mut store_settings, redis.url());
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let (a, b) = (
        instance(&store_settings, &clock).await,
        instance(&store_settings, &clock).await,
    );
    eventually("both instances see two", Duration::from_secs(5), || async {
        (a.limiter.instances() == 2 && b.limiter.instances() == 2).then_some(())
    })
    .await;

    // Before: Redis decides and counts 2 of user 1's 5.
    assert_eq!(a.admitted("local", 1, 2).await, (2, true));
    assert_eq!(a.mode("local"), "redis");

    redis.stop();
    // `local`: each instance admits its share, ⌈5/2⌉ = 3, and refuses the rest without
    // Redis. The two together admit 6 ≤ T + n − 1 while Redis is away; the window
    // across the switch holds 2 + 6 = 8 ≤ T + n·⌈T/n⌉.
    assert_eq!(a.admitted("local", 1, 10).await, (3, true));
    assert_eq!(b.admitted("local", 1, 10).await, (3, true));
    assert_eq!(
        (a.mode("local"), b.mode("local")),
        ("local".into(), "local".into())
    );
    // A refusal names its wait: the first sub-window (60 000 / 16 = 3 750 ms) leaves
    // the count a window after it ends.
    let Err(Rejection::Refused(refusal)) = a.limiter.check("local", None, &caller(1)).await else {
        panic!("the share is used up");
    };
    let now = clock.now_ms() as u64;
    assert_eq!(
        refusal.retry_after_ms(),
        (now / 3_750 + 1) * 3_750 + WINDOW_MS - now
    );
    // `open` admits everything, `closed` nothing.
    assert_eq!(a.admitted("open", 2, 10).await, (10, true));
    assert_eq!(a.mode("open"), "open");
    for _ in 0..3 {
        assert!(matches!(
            a.limiter.check("closed", None, &caller(3)).await,
            Err(Rejection::Unavailable)
        ));
    }
    assert_eq!(a.mode("closed"), "closed");
    // The local window moves like any: a minute on, the share is back.
    clock.advance_ms(WINDOW_MS as i64 + 3_750);
    assert_eq!(a.admitted("local", 1, 10).await, (3, true));

    // Back: the first call after Redis returns may still meet the old connection; once
    // Redis answers, it decides again. This Redis kept no data (no persistence), so it
    // admits the whole threshold: the window around the outage held 2 + 6 before and 3
    // + 5 after, each within its bound.
    redis.restart().await;
    eventually("redis decides again", Duration::from_secs(5), || async {
        let probe = a.limiter.check("local", None, &caller(99)).await;
        (probe.is_ok() && a.mode("local") == "redis").then_some(())
    })
    .await;
    // (Refusals after the fifth come from the denial cache, taught by the fifth.)
    assert_eq!(a.admitted("local", 1, 10).await.0, 5);
    assert_eq!(a.admitted("open", 2, 10).await.0, 5);
    assert!(a.limiter.check("closed", None, &caller(3)).await.is_ok());
    assert_eq!(
        (a.mode("open"), a.mode("closed")),
        ("redis".into(), "redis".into())
    );
}

/// Issue 33, item 9: an instance whose heartbeat Redis never answered (Redis went
/// before it) counted itself alone and took the whole threshold, 5, beside a fleet
/// that had its share already. It counts at least `fleet_floor` instances: with a floor
/// of 3 it takes ⌈5/3⌉ = 2.
#[tokio::test]
async fn an_instance_that_never_counted_its_peers_takes_the_fleet_floors_share() {
    let mut redis = OwnRedis::start().await;
    let mut store_settings = redis_test_settings();
    use_own_redis(&mut store_settings, redis.url());
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let store = RedisStore::connect(
        &seckill::startup::redis_options(&store_settings),
        Arc::clone(&metrics),
    )
    .await
    .expect("redis");
    redis.stop();
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let floored = LimiterSettings {
        fleet_floor: 3,
        ..settings()
    };
    let limiter = Arc::new(
        Limiter::new(store, &floored, Arc::clone(&metrics))
            .expect("valid policies")
            .with_clock(Clock::Manual(clock.clone())),
    );
    let beat = tokio::spawn(Arc::clone(&limiter).beat());
    let late = Instance {
        limiter,
        metrics,
        beat,
    };
    assert_eq!(late.admitted("local", 1, 10).await, (2, true));
}
