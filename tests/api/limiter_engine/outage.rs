//! Redis down under a fail-closed policy: every request fails, and the log says so once.

use std::sync::Arc;

use seckill::limiter::policy::KeySource;
use seckill::limiter::{Algorithm, FailMode, Limiter, Rejection};
use seckill::metrics::Metrics;
use seckill::store::RedisStore;

use super::{caller, one_policy, rule};
use seckill_test_support::redis_test_settings;

/// Counts WARN events on the thread it is installed on.
struct CountWarnings(Arc<std::sync::atomic::AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// While Redis is down every request of a fail-closed policy fails, and the log says so
/// once per burst, not once per request (which would bury the log when it matters).
#[tokio::test]
async fn a_redis_outage_is_logged_once_per_burst_when_failing_closed() {
    use tracing_subscriber::layer::SubscriberExt;

    let mut redis = seckill_test_support::OwnRedis::start().await;
    let mut settings = redis_test_settings();
    seckill_test_support::use_own_redis(&mut settings, redis.url());
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let store = RedisStore::connect(
        &seckill::startup::redis_options(&settings),
        Arc::clone(&metrics),
    )
    .await
    .expect("redis");
    let limiter = Limiter::new(
        store,
        &one_policy(
            Algorithm::SlidingWindow,
            FailMode::Closed,
            vec![rule("only", KeySource::User, 60_000, 10)],
            0,
        ),
        metrics,
    )
    .expect("valid policies");
    assert!(limiter.check("p", None, &caller(1)).await.is_ok());

    redis.stop();
    let warnings = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let subscriber = tracing_subscriber::registry().with(CountWarnings(Arc::clone(&warnings)));
    let _on_this_thread = tracing::subscriber::set_default(subscriber);
    for user in 1..=50 {
        assert!(matches!(
            limiter.check("p", None, &caller(user)).await,
            Err(Rejection::Unavailable)
        ));
    }
    assert_eq!(
        warnings.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one warning for a burst of 50 failures"
    );
}
