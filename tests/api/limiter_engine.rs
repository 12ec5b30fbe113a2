//! The limiter engine against real Redis: concurrency, all-or-nothing, time, TTLs, one
//! module each, on the engine built here. A frozen app-supplied clock makes every
//! outcome exact.

mod all_or_nothing;
mod concurrency;
mod edits;
mod fallback;
mod outage;
mod time;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use seckill::domain::{ClientIp, UserId};
use seckill::limiter::policy::{KeySource, PolicyConfig, RuleConfig};
use seckill::limiter::{
    keys, Algorithm, Answer, Ask, Caller, Clock, Cost, FailMode, Limiter, LimiterSettings,
    ManualClock, Rejection, Scope,
};
use seckill::metrics::{Metrics, RedisPurpose};
use seckill::store::RedisStore;

use seckill_test_support::{eventually, redis_test_settings};

pub fn rule(name: &str, key: KeySource, window_ms: u64, threshold: u64) -> RuleConfig {
    RuleConfig::new(name, key, window_ms, threshold, &format!("{name} says no"))
}

pub struct Engine {
    pub limiter: Arc<Limiter>,
    pub clock: ManualClock,
    pub redis: RedisStore,
    pub metrics: Arc<Metrics>,
}

/// Limiter settings with one policy `p` and `slots` slots of denial cache.
pub fn one_policy(
    algorithm: Algorithm,
    fail_mode: FailMode,
    rules: Vec<RuleConfig>,
    slots: usize,
) -> LimiterSettings {
    let mut policies = BTreeMap::new();
    policies.insert(
        "p".to_string(),
        PolicyConfig {
            scope: Scope::Global,
            algorithm,
            fail_mode,
            enabled: true,
            rules,
        },
    );
    LimiterSettings {
        policies,
        denial_cache_slots: slots,
        ..LimiterSettings::default()
    }
}

/// A limiter with one policy `p`, its own key prefix, a frozen clock and the default
/// denial cache.
pub async fn engine(algorithm: Algorithm, rules: Vec<RuleConfig>) -> Engine {
    engine_with_denial_cache(
        algorithm,
        rules,
        LimiterSettings::default().denial_cache_slots,
    )
    .await
}

/// The same with `slots` slots of denial cache (0 = off: every decision asks Redis).
pub async fn engine_with_denial_cache(
    algorithm: Algorithm,
    rules: Vec<RuleConfig>,
    slots: usize,
) -> Engine {
    let settings = redis_test_settings();
    let metrics = Arc::new(Metrics::new().expect("metrics"));
    let redis = RedisStore::connect(
        &seckill::startup::redis_options(&settings),
        Arc::clone(&metrics),
    )
    .await
    .expect("redis");
    let limiter_settings = one_policy(algorithm, FailMode::Open, rules, slots);
    let clock = ManualClock::starting_at(1_700_000_000_000);
    let limiter = Limiter::new(redis.clone(), &limiter_settings, Arc::clone(&metrics))
        .expect("valid policies")
        .with_clock(Clock::Manual(clock.clone()));
    Engine {
        limiter: Arc::new(limiter),
        clock,
        redis,
        metrics,
    }
}

pub fn caller(user: i64) -> Caller<'static> {
    Caller {
        user: Some(UserId::try_from(user).expect("positive")),
        ip: ClientIp::new([10, 0, 0, 1].into()),
        client_id: None,
        route: "/test".into(),
        partition: None,
    }
}

impl Engine {
    pub async fn check(
        &self,
        caller: &Caller<'_>,
    ) -> Result<seckill::limiter::Admission, Rejection> {
        self.limiter.check("p", None, caller).await
    }

    /// Asks for `caller` through `Limiter::ask` (the edge's entry) on policy `p`'s
    /// rules and keys, `costs[i]` hits under rule `i`, under `generation` (the number of
    /// real edits so far, to share the policy path's denials).
    pub async fn ask(
        &self,
        algorithm: Algorithm,
        caller: &Caller<'_>,
        costs: &[u64],
        generation: u64,
    ) -> Answer {
        let policy = self.limiter.policy("p").expect("policy p");
        let keys: Vec<String> = policy
            .rules
            .iter()
            .map(|rule| {
                keys::redis_key(self.redis.prefix(), &policy, algorithm, rule, caller)
                    .expect("a global policy's key")
            })
            .collect();
        let costs: Vec<Cost> = costs
            .iter()
            .map(|&hits| Cost::new(hits).expect("a cost of 1 or more"))
            .collect();
        self.limiter
            .ask(&Ask {
                name: "p",
                generation,
                algorithm,
                fail_mode: FailMode::Open,
                rules: &policy.rules,
                enforced: policy.enforced,
                keys: &keys,
                costs: &costs,
            })
            .await
    }

    pub fn key(&self, algorithm: Algorithm, rule: &str, value: &str) -> String {
        format!("{}:{{p}}:{algorithm}:{rule}:{value}", self.redis.prefix())
    }

    /// Everything stored under `key`, as Redis would dump it, for before/after equality.
    pub async fn snapshot(&self, key: &str) -> Vec<String> {
        let kind: String = self.query(redis::cmd("TYPE").arg(key)).await;
        match kind.as_str() {
            "zset" => {
                self.query(
                    redis::cmd("ZRANGE")
                        .arg(key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES"),
                )
                .await
            }
            "hash" => {
                let mut all: Vec<String> = self.query(redis::cmd("HGETALL").arg(key)).await;
                all.sort();
                all
            }
            "none" => vec![],
            other => panic!("unexpected type {other}"),
        }
    }

    pub async fn pttl(&self, key: &str) -> i64 {
        self.query(redis::cmd("PTTL").arg(key)).await
    }

    /// When `key` expires, in Unix ms (`PEXPIRETIME`): unlike `PTTL`, it does not move
    /// with the clock, so equal values mean the expiry was not touched.
    pub async fn expire_time(&self, key: &str) -> i64 {
        self.query(redis::cmd("PEXPIRETIME").arg(key)).await
    }

    /// Puts `rules` in force for policy `p` at run time, as an admin edit does (every
    /// instance then calls `replace_policies` with the new set).
    pub fn set_rules(&self, algorithm: Algorithm, rules: Vec<RuleConfig>) {
        let settings = one_policy(algorithm, FailMode::Open, rules, 0);
        let set = seckill::limiter::PolicySet::parse(&settings.policies).expect("valid rules");
        self.limiter.replace_policies(set);
    }

    /// Returns once `ms` of Redis's own time have passed (a marker key set to expire in
    /// `ms` is gone): every key whose TTL was at most `ms` when this was called has
    /// expired too. Keys expire by Redis's clock, which the manual clock does not move.
    pub async fn redis_time_passes(&self, ms: u64) {
        let marker = format!("{}:marker:{}", self.redis.prefix(), uuid::Uuid::new_v4());
        let _: () = self
            .query(redis::cmd("SET").arg(&marker).arg(1).arg("PX").arg(ms))
            .await;
        eventually(
            "the marker key expires",
            Duration::from_millis(ms) + Duration::from_secs(10),
            || async { (self.pttl(&marker).await == -2).then_some(()) },
        )
        .await;
    }

    /// `DUMP` of `key`: its exact serialized value, `None` when it does not exist.
    pub async fn dump(&self, key: &str) -> Option<Vec<u8>> {
        self.query(redis::cmd("DUMP").arg(key)).await
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        self.redis
            .call(RedisPurpose::Other, cmd)
            .await
            .expect("redis answers")
    }

    pub fn counter(&self, name: &str, labels: &[&str]) -> u64 {
        match name {
            "fail_open" => self
                .metrics
                .limiter_fail_open
                .with_label_values(labels)
                .get(),
            "decisions" => self
                .metrics
                .limiter_decisions
                .with_label_values(labels)
                .get(),
            "near_limit" => self
                .metrics
                .limiter_near_limit
                .with_label_values(labels)
                .get(),
            "shadow_refusals" => self
                .metrics
                .limiter_shadow_refusals
                .with_label_values(labels)
                .get(),
            _ => unreachable!(),
        }
    }
}

fn refused(
    result: Result<seckill::limiter::Admission, Rejection>,
) -> Box<seckill::limiter::Refusal> {
    match result {
        Err(Rejection::Refused(refusal)) => refusal,
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("expected a refusal, got an admission"),
    }
}
