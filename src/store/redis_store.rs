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
//!
//! **One server or a cluster.** With [`RedisOptions::cluster_nodes`] set, each thread's
//! connection is a Redis Cluster connection instead: it routes every command to the
//! master of its key's slot (a script by its first key, a pipeline by its first keyed
//! command: the callers keep each script's and each `MULTI` pipeline's keys in one slot
//! with hash tags), follows `MOVED`/`ASK` after a resharding or a failover, and retries
//! within the call's timeout, which still bounds every call.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, ScriptInvocation, Value};
use secrecy::{ExposeSecret, SecretString};
use thread_local::ThreadLocal;
use tokio::sync::OnceCell;

use crate::metrics::{Metrics, RedisPurpose};

/// A handle on the deployment's Redis; cheap to clone.
#[derive(Clone)]
pub struct RedisStore(Arc<Shared>);

struct Shared {
    topology: Topology,
    prefix: Box<str>,
    metrics: Arc<Metrics>,
    /// The limiter's budget: a decision that cannot be had quickly is worth less than
    /// the fail mode's answer.
    limiter_timeout: Duration,
    /// Every other call (sale, idempotency, admin, background tasks).
    timeout: Duration,
    connections: ThreadLocal<OnceCell<RedisConnection>>,
}

/// Where the deployment's Redis is.
enum Topology {
    Single {
        client: redis::Client,
        config: ConnectionManagerConfig,
    },
    Cluster(ClusterClient),
}

impl Topology {
    fn new(settings: &RedisOptions) -> anyhow::Result<Self> {
        Ok(if settings.cluster_nodes.is_empty() {
            let client = redis::Client::open(settings.url.expose_secret())
                .context("REDIS_URL is not a valid Redis URL")?;
            // One connection attempt per reconnect, no backoff: commands issued while
            // the manager reconnects wait for that attempt, and with retries a refused
            // connection made every request wait out the backoff (measured: 250 ms
            // each, the limiter timeout, instead of 0.2 ms). Each failed command starts
            // a new attempt, so the first command after Redis returns reconnects.
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_millis(500)))
                .set_response_timeout(Some(Duration::from_secs(2)))
                .set_number_of_retries(0);
            Self::Single { client, config }
        } else {
            let nodes: Vec<&str> = settings
                .cluster_nodes
                .iter()
                .map(|node| node.expose_secret())
                .collect();
            // Retries (after MOVED, or while a failover promotes a replica) are cut
            // short by each call's own timeout: a purchase during a failover fails
            // closed within its budget instead of waiting for the cluster.
            let client = ClusterClient::builder(nodes)
                .connection_timeout(Duration::from_millis(500))
                .response_timeout(Duration::from_secs(2))
                .retries(5)
                .min_retry_wait(20)
                .max_retry_wait(200)
                .build()
                .context("SECKILL_REDIS_CLUSTER_NODES is not a list of Redis URLs")?;
            Self::Cluster(client)
        })
    }

    async fn connect(&self) -> RedisResult<RedisConnection> {
        Ok(match self {
            Self::Single { client, config } => RedisConnection::Single(
                ConnectionManager::new_with_config(client.clone(), config.clone()).await?,
            ),
            Self::Cluster(client) => RedisConnection::Cluster(client.get_async_connection().await?),
        })
    }
}

/// A connection to the one server or to the cluster: each thread's own in the store,
/// or one for a tool or a test ([`RedisStore::connect_raw`]).
#[derive(Clone)]
pub enum RedisConnection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
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
    /// The nodes of a Redis Cluster to use instead of `url` (any of them will do to
    /// find the others); empty for one server.
    pub cluster_nodes: Vec<SecretString>,
    pub key_prefix: String,
    pub limiter_timeout: Duration,
    pub timeout: Duration,
}

impl RedisStore {
    /// Checks the URL and that Redis answers; connections are made per thread later.
    pub async fn connect(settings: &RedisOptions, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let topology = Topology::new(settings)?;
        let store = Self(Arc::new(Shared {
            topology,
            prefix: settings.key_prefix.as_str().into(),
            metrics,
            limiter_timeout: settings.limiter_timeout,
            timeout: settings.timeout,
            connections: ThreadLocal::new(),
        }));
        store.ping().await.context("connecting to Redis")?;
        Ok(store)
    }

    /// Whether this store talks to a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.0.topology, Topology::Cluster(_))
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
    async fn connection(&self) -> RedisResult<RedisConnection> {
        let shared = &self.0;
        let cell = shared.connections.get_or_default();
        cell.get_or_try_init(|| shared.topology.connect())
            .await
            .cloned()
    }

    /// A connection of its own, outside the store (no timeout, no metrics): for tools
    /// and tests that read back what the app wrote, on one server or a cluster alike.
    pub async fn connect_raw(settings: &RedisOptions) -> anyhow::Result<RedisConnection> {
        Ok(Topology::new(settings)?.connect().await?)
    }
}
