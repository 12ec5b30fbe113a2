//! Redis: the one place every Redis call goes through.
//!
//! [`RedisStore::call`] is the only way the application talks to Redis on a request or
//! in a background task (the sold-out subscription, a long-lived `SUBSCRIBE`, is the one
//! exception). It picks the connection, bounds the call with the timeout of its
//! [`RedisPurpose`], and counts it and its failure in `seckill_redis_calls_total` /
//! `seckill_redis_errors_total`, so no caller chooses its own timeout or forgets a metric.
//!
//! **One connection per thread.** actix runs each worker on its own single-threaded
//! runtime. A connection is a socket plus a driver task spawned on the runtime that
//! created it; a connection created in `main` made every call from a worker hop to
//! `main`'s threads and back (measured: 25 % of the refusal path's CPU in context
//! switches). So each thread that calls Redis gets its own multiplexed
//! [`ConnectionManager`], created lazily by its first call, on its own runtime. Calls of
//! one worker still pipeline over that worker's socket, and the manager reconnects after
//! Redis restarts.
//!
//! The per-thread connections belong to the store, not to a global: a test that starts
//! many applications in one process gets separate connections for each.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, FromRedisValue, Pipeline, RedisResult, ScriptInvocation};
use secrecy::{ExposeSecret, SecretString};
use thread_local::ThreadLocal;
use tokio::sync::OnceCell;

use crate::metrics::{Metrics, RedisPurpose};

/// A handle on the deployment's Redis; cheap to clone.
#[derive(Clone)]
pub struct RedisStore(Arc<Shared>);

struct Shared {
    client: redis::Client,
    config: ConnectionManagerConfig,
    prefix: Box<str>,
    metrics: Arc<Metrics>,
    /// The limiter's budget: a decision that cannot be had quickly is worth less than
    /// the fail mode's answer.
    limiter_timeout: Duration,
    /// Every other call (sale, idempotency, admin, background tasks).
    timeout: Duration,
    connections: ThreadLocal<OnceCell<ConnectionManager>>,
}

/// Why a Redis call produced no answer.
#[derive(Debug, thiserror::Error)]
pub enum RedisCallError {
    #[error("redis ({purpose}): no answer within {timeout:?}")]
    Timeout {
        purpose: &'static str,
        timeout: Duration,
    },
    #[error("redis ({purpose}): {source}")]
    Failed {
        purpose: &'static str,
        source: redis::RedisError,
    },
}

/// Something that is sent to Redis as one call: a command, a pipeline, a script.
/// Callers pass `&cmd`, `&pipe` or `&invocation`; it converts.
#[derive(Clone, Copy)]
pub enum Request<'a> {
    Cmd(&'a Cmd),
    Pipeline(&'a Pipeline),
    Script(&'a ScriptInvocation<'a>),
}

impl<'a> From<&'a Cmd> for Request<'a> {
    fn from(cmd: &'a Cmd) -> Self {
        Self::Cmd(cmd)
    }
}

impl<'a> From<&'a mut Cmd> for Request<'a> {
    fn from(cmd: &'a mut Cmd) -> Self {
        Self::Cmd(cmd)
    }
}

impl<'a> From<&'a Pipeline> for Request<'a> {
    fn from(pipeline: &'a Pipeline) -> Self {
        Self::Pipeline(pipeline)
    }
}

impl<'a> From<&'a ScriptInvocation<'a>> for Request<'a> {
    fn from(invocation: &'a ScriptInvocation<'a>) -> Self {
        Self::Script(invocation)
    }
}

/// Where Redis is, this deployment's key prefix and the call timeouts (from the
/// settings: `Settings::redis_options`).
#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub url: SecretString,
    pub key_prefix: String,
    pub limiter_timeout: Duration,
    pub timeout: Duration,
}

impl RedisStore {
    /// Checks the URL and that Redis answers; connections are made per thread later.
    pub async fn connect(settings: &RedisOptions, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let client = redis::Client::open(settings.url.expose_secret())
            .context("REDIS_URL is not a valid Redis URL")?;
        // One connection attempt per reconnect, no backoff: commands issued while the
        // manager reconnects wait for that attempt, and with retries a refused
        // connection made every request wait out the backoff (measured: 250 ms each,
        // the limiter timeout, instead of 0.2 ms). Each failed command starts a new
        // attempt, so the first command after Redis returns reconnects.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_millis(500))
            .set_response_timeout(Duration::from_secs(2))
            .set_number_of_retries(0);
        let store = Self(Arc::new(Shared {
            client,
            config,
            prefix: settings.key_prefix.as_str().into(),
            metrics,
            limiter_timeout: settings.limiter_timeout,
            timeout: settings.timeout,
            connections: ThreadLocal::new(),
        }));
        store.ping().await.context("connecting to Redis")?;
        Ok(store)
    }

    /// The key prefix of this deployment (`RedisOptions::key_prefix`).
    pub fn prefix(&self) -> &str {
        &self.0.prefix
    }

    /// The timeout every call made for `purpose` gets.
    pub fn timeout(&self, purpose: RedisPurpose) -> Duration {
        match purpose {
            RedisPurpose::Limiter => self.0.limiter_timeout,
            _ => self.0.timeout,
        }
    }

    /// Sends one request on this thread's connection, within the purpose's timeout,
    /// counted by purpose. The only way to call Redis (see the module docs).
    pub async fn call<'r, T: FromRedisValue>(
        &self,
        purpose: RedisPurpose,
        request: impl Into<Request<'r>>,
    ) -> Result<T, RedisCallError> {
        let request = request.into();
        let metrics = &self.0.metrics;
        metrics.redis_call(purpose);
        let timeout = self.timeout(purpose);
        let call = async {
            let mut conn = self.connection().await?;
            match request {
                Request::Cmd(cmd) => cmd.query_async(&mut conn).await,
                Request::Pipeline(pipeline) => pipeline.query_async(&mut conn).await,
                Request::Script(invocation) => invocation.invoke_async(&mut conn).await,
            }
        };
        let result = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(source)) => RedisCallError::Failed {
                purpose: purpose.as_str(),
                source,
            },
            Err(_) => RedisCallError::Timeout {
                purpose: purpose.as_str(),
                timeout,
            },
        };
        metrics.redis_error(purpose);
        Err(result)
    }

    /// Readiness probe and start-up check: `PING`.
    pub async fn ping(&self) -> Result<(), RedisCallError> {
        self.call::<String>(RedisPurpose::Other, &redis::cmd("PING"))
            .await
            .map(drop)
    }

    /// This thread's connection, made on first use. Made on the runtime of the calling
    /// thread, which then drives it (see the module docs). A failed attempt is not
    /// kept: the next call tries again.
    async fn connection(&self) -> RedisResult<ConnectionManager> {
        let shared = &self.0;
        let cell = shared.connections.get_or_default();
        cell.get_or_try_init(|| {
            ConnectionManager::new_with_config(shared.client.clone(), shared.config.clone())
        })
        .await
        .cloned()
    }
}
