//! The bound on the distinct keys a domain counts under.
//!
//! Descriptor values are a client's (an address, an API key, a path), and each distinct
//! value of a limited descriptor is a counter in Redis. The counters expire with their
//! window, but within one, a script with a thousand addresses makes a thousand keys, and
//! one with random values makes keys without end. So each domain holds at most
//! `max_keys` (`SECKILL_RLS_MAX_KEYS`) counted keys at once, across instances:
//!
//! - **Where:** `<prefix>:{rls:<domain>}:keys`, a sorted set in the domain's own slot,
//!   member = a counter key, score = the time until which it counts (its window from
//!   when it was registered). `lua/rls_register_keys.lua` drops the members whose time
//!   has passed, then adds the new keys only if all fit: a request with a key there is no
//!   room for is refused whole (OVER_LIMIT) and counts nothing. Refusing, not admitting:
//!   admitting would let a flood of fresh values past every limit of the domain.
//! - **Cost per decision:** nothing for a key this instance registered and whose time is
//!   not up (an in-process table of them, itself bounded); one extra round trip, `O(log
//!   n)` per key, for a new key. A stampede on one key pays it once per window per
//!   instance; a flood of fresh values pays it on every request, which is what it is
//!   for.

use std::sync::Mutex;
use std::time::Instant;

use redis::Script;

use crate::limiter::key_table::{Eviction, Held, KeyTable};
use crate::metrics::RedisPurpose;
use crate::store::redis_store::RedisCallError;
use crate::store::RedisStore;

/// Keys this instance remembers as registered (about 100 bytes each).
const REMEMBERED: usize = 50_000;

/// What the registry answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// Every key is registered.
    All,
    /// No room for `keys[i]` (the first such): nothing was added.
    NoRoomFor(usize),
}

/// Until when (this process's ms) a key is known to be registered.
struct Until(u64);

impl Held for Until {
    fn refuses(&self, _: u64) -> bool {
        false
    }
    fn is_stale(&self, now_ms: u64) -> bool {
        now_ms >= self.0
    }
    fn weight(&self, _: u64) -> u64 {
        0
    }
}

/// The registries of every domain, and the keys this instance knows are in them.
pub struct KeyRegistry {
    redis: RedisStore,
    script: Script,
    max_keys: u64,
    known: Mutex<KeyTable<String, Until>>,
    epoch: Instant,
}

impl KeyRegistry {
    /// At most `max_keys` counted keys per domain, on `redis`.
    pub fn new(redis: RedisStore, max_keys: u64) -> Self {
        Self {
            redis,
            script: Script::new(include_str!("../../lua/rls_register_keys.lua")),
            max_keys,
            known: Mutex::new(KeyTable::new(REMEMBERED, Eviction::NotRefusing)),
            epoch: Instant::now(),
        }
    }

    /// The deployment's key prefix, which every counter key starts with.
    pub fn prefix(&self) -> &str {
        self.redis.prefix()
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Registers `keys` (each with its window, ms) in `domain`'s registry, asking Redis
    /// only for the keys this instance does not know to be there.
    pub async fn register(
        &self,
        domain: &str,
        keys: &[(&str, u64)],
    ) -> Result<Registered, RedisCallError> {
        let now = self.now_ms();
        let unknown: Vec<usize> = {
            let known = self
                .known
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            (0..keys.len())
                .filter(|&i| known.get(keys[i].0).is_none_or(|until| until.is_stale(now)))
                .collect()
        };
        if unknown.is_empty() {
            return Ok(Registered::All);
        }
        let registry = format!("{}:{{rls:{domain}}}:keys", self.redis.prefix());
        let mut invocation = self.script.prepare_invoke();
        invocation.key(&registry).arg(self.max_keys);
        for &i in &unknown {
            invocation.arg(keys[i].0).arg(keys[i].1.max(1));
        }
        let answer: usize = self.redis.call(RedisPurpose::Limiter, &invocation).await?;
        if let Some(&refused) = answer.checked_sub(1).and_then(|k| unknown.get(k)) {
            return Ok(Registered::NoRoomFor(refused));
        }
        let mut known = self
            .known
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for &i in &unknown {
            let (key, window_ms) = keys[i];
            // Known a tenth short of its registration, so this instance registers it
            // again before Redis lets it go.
            let until = now + window_ms - window_ms / 10;
            if known.make_room(1, now, |k| k == key).is_ok() {
                known.insert(key.to_string(), Until(until));
            }
        }
        Ok(Registered::All)
    }
}
