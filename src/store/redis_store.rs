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
//!
//! **Or a master watched by Sentinel.** With [`RedisOptions::sentinels`] set, each
//! thread's connection is a [`SentinelMaster`]: the sentinels name the master (the
//! `redis` crate's lookup), and a reply that says the master is gone, or a call left
//! without a reply, makes the next call ask them again (ours: the crate's connection
//! stays pinned to one address). During a failover's gap calls fail at once, so
//! purchases fail closed within their budget. See `sentinel_master` and
//! docs/redis-sentinel.md.

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

use super::sentinel_master::{SentinelMaster, SentinelSetup};
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
        /// For the subscriber ([`RedisStore::subscriber_urls`]).
        url: SecretString,
    },
    Cluster {
        client: ClusterClient,
        nodes: Vec<SecretString>,
    },
    Sentinel(SentinelSetup),
}

impl Topology {
    fn new(settings: &RedisOptions) -> anyhow::Result<Self> {
        anyhow::ensure!(
            settings.cluster_nodes.is_empty() || settings.sentinels.is_empty(),
            "SECKILL_REDIS_CLUSTER_NODES and SECKILL_REDIS_SENTINELS are both set: Redis is \
             either a cluster or a master watched by sentinels; set one of them"
        );
        if !settings.sentinels.is_empty() {
            return Ok(Self::Sentinel(SentinelSetup::new(
                &settings.sentinels,
                &settings.sentinel_master,
                &settings.url,
            )?));
        }
        Ok(if settings.cluster_nodes.is_empty() {
            let client = redis::Client::open(settings.url.expose_secret())
                .context("REDIS_URL is not a valid Redis URL")?;
            // One connection attempt per reconnect, no backoff: commands issued while
            // the manager reconnects wait for that attempt, and with retries a refused
            // connection made every request wait out the backoff (measured: 250 ms
            // each, the limiter timeout, instead of 0.2 ms). Each failed command starts
            // a new attempt, and `RedisStore::call` sends the command again on it when
            // that is safe (`sent_again`), so the first command after Redis returns is
            // answered.
            let config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(Duration::from_millis(500)))
                .set_response_timeout(Some(Duration::from_secs(2)))
                .set_number_of_retries(0);
            Self::Single {
                client,
                config,
                url: settings.url.clone(),
            }
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
            Self::Cluster {
                client,
                nodes: settings.cluster_nodes.clone(),
            }
        })
    }

    async fn connect(&self) -> RedisResult<RedisConnection> {
        Ok(match self {
            Self::Single { client, config, .. } => RedisConnection::Single(
                ConnectionManager::new_with_config(client.clone(), config.clone()).await?,
            ),
            Self::Cluster { client, .. } => {
                RedisConnection::Cluster(client.get_async_connection().await?)
            }
            Self::Sentinel(setup) => {
                RedisConnection::Sentinel(SentinelMaster::connect(setup.clone()).await?)
            }
        })
    }
}

/// A connection to the one server, the cluster or the sentinels' master: each thread's
/// own in the store, or one for a tool or a test ([`RedisStore::connect_raw`]).
#[derive(Clone)]
pub enum RedisConnection {
    /// One server, through a reconnecting connection manager.
    Single(ConnectionManager),
    /// A Redis Cluster, routed by slot.
    Cluster(ClusterConnection),
    /// The master the sentinels name, followed across failovers.
    Sentinel(SentinelMaster),
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
            Self::Sentinel(conn) => conn.req_packed_command(cmd),
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
            Self::Sentinel(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
            Self::Sentinel(conn) => conn.get_db(),
        }
    }
}

/// Why a Redis call produced no answer.
#[derive(Debug, thiserror::Error)]
pub enum RedisCallError {
    /// No answer within the timeout; the call may still have run.
    #[error("redis ({purpose}): no answer within {timeout:?}")]
    Timeout {
        /// What the call was for, in the log.
        purpose: &'static str,
        /// The timeout it missed.
        timeout: Duration,
    },
    /// Redis answered with an error, or the connection failed.
    #[error("redis ({purpose}): {source}")]
    Failed {
        /// What the call was for, in the log.
        purpose: &'static str,
        /// Redis's error.
        source: redis::RedisError,
    },
}

/// Something that is sent to Redis as one call: a command, a pipeline, a script.
/// Callers pass `&cmd`, `&pipe` or `&invocation`; it converts.
#[derive(Clone, Copy)]
pub enum Request<'a> {
    /// One command.
    Cmd(&'a Cmd),
    /// A pipeline (a MULTI/EXEC one included).
    Pipeline(&'a Pipeline),
    /// A script call (EVALSHA, EVAL when the script is not loaded).
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
    /// The Redis server, or under Sentinel the master's credentials and database. A secret:
    /// it may carry a password.
    pub url: SecretString,
    /// The nodes of a Redis Cluster to use instead of `url` (any of them will do to
    /// find the others); empty for one server.
    pub cluster_nodes: Vec<SecretString>,
    /// Redis Sentinels to ask for the master instead of using `url`'s address (`url`
    /// still gives the master's credentials and database); empty: no Sentinel. Never
    /// with `cluster_nodes`.
    pub sentinels: Vec<SecretString>,
    /// The name the sentinels monitor the master under.
    pub sentinel_master: String,
    /// Put before every key of this deployment, so deployments can share a Redis.
    pub key_prefix: String,
    /// How long the limiter waits for Redis before its fail mode applies.
    pub limiter_timeout: Duration,
    /// How long every other call waits.
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
        matches!(self.0.topology, Topology::Cluster { .. })
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
    ///
    /// A request is sent once more, within the same timeout, when the first try found
    /// the connection gone and the manager has started a new one (see
    /// `sent_again`): a restart of Redis leaves each thread's connection stale, and
    /// its first call would otherwise fail although one reconnect serves it.
    pub async fn call<'r, T: FromRedisValue>(
        &self,
        purpose: RedisPurpose,
        request: impl Into<Request<'r>>,
    ) -> Result<T, RedisCallError> {
        let repeatable = matches!(purpose, RedisPurpose::Limiter | RedisPurpose::Idempotency);
        self.call_once_more(purpose, request.into(), repeatable)
            .await
    }

    async fn call_once_more<T: FromRedisValue>(
        &self,
        purpose: RedisPurpose,
        request: Request<'_>,
        repeatable: bool,
    ) -> Result<T, RedisCallError> {
        let metrics = &self.0.metrics;
        metrics.redis_call(purpose);
        let timeout = self.timeout(purpose);
        let call = async {
            match self.send(request).await {
                Err(e) if sent_again(&e, repeatable) => {
                    tracing::debug!(purpose = purpose.as_str(), error = %e, "redis: sent again on a new connection");
                    self.send(request).await
                }
                answer => answer,
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

    /// One try on this thread's connection.
    async fn send<T: FromRedisValue>(&self, request: Request<'_>) -> RedisResult<T> {
        let mut conn = self.connection().await?;
        match request {
            Request::Cmd(cmd) => cmd.query_async(&mut conn).await,
            Request::Pipeline(pipeline) => pipeline.query_async(&mut conn).await,
            Request::Script(invocation) => invocation.invoke_async(&mut conn).await,
        }
    }

    /// Readiness probe and start-up check: `PING`, which may be sent twice.
    pub async fn ping(&self) -> Result<(), RedisCallError> {
        self.call_once_more::<String>(RedisPurpose::Other, (&redis::cmd("PING")).into(), true)
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

    /// Where a subscriber, which needs a connection of its own (the sold-out channel),
    /// may connect, in the order to try them: the one server; the cluster's nodes (a
    /// `PUBLISH` reaches every node's subscribers); under Sentinel, the master and its
    /// replicas as the sentinels name them when asked (a `PUBLISH` on the master
    /// reaches its replicas' subscribers too, so a subscriber that moves on after its
    /// server died finds the promoted replica in the list). Asks the sentinels again
    /// every second until they answer.
    pub async fn subscriber_urls(&self) -> Vec<SecretString> {
        match &self.0.topology {
            Topology::Single { url, .. } => vec![url.clone()],
            Topology::Cluster { nodes, .. } => nodes.clone(),
            Topology::Sentinel(setup) => loop {
                match setup.node_urls().await {
                    Ok(urls) if !urls.is_empty() => break urls,
                    Ok(_) => tracing::warn!("the sentinels name no Redis master to subscribe to"),
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "no Redis master to subscribe to")
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            },
        }
    }

    /// A connection of its own, outside the store (no timeout, no metrics): for tools
    /// and tests that read back what the app wrote, on any topology.
    pub async fn connect_raw(settings: &RedisOptions) -> anyhow::Result<RedisConnection> {
        Ok(Topology::new(settings)?.connect().await?)
    }
}

/// Whether a failed try is sent once more: when the connection could not be made
/// (a refused connection: the request never left, whatever it is), and, for a
/// `repeatable` request, when the connection was found broken or reset. A broken
/// connection does not say whether the request reached Redis before it broke (a stale
/// connection fails before sending, one that breaks in flight after), so only a
/// request whose repeat is harmless is sent again then: `PING`; the limiter's scripts,
/// whose repeat can count one request twice, which refuses sooner, never admits more;
/// the idempotency records (a repeated claim knows its own record by its order id, a
/// repeated answer or release writes the same again). A reservation or a stock edit
/// is never sent again after a broken connection (a repeat would answer "already
/// bought", apply an edit twice), nor any request after a timeout, which may have run.
fn sent_again(error: &redis::RedisError, repeatable: bool) -> bool {
    if error.is_timeout() {
        return false;
    }
    error.is_connection_refusal() || (repeatable && error.is_connection_dropped())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(cluster_nodes: &[&str], sentinels: &[&str]) -> RedisOptions {
        let urls = |list: &[&str]| list.iter().map(|u| SecretString::from(*u)).collect();
        RedisOptions {
            url: SecretString::from("redis://127.0.0.1:6380"),
            cluster_nodes: urls(cluster_nodes),
            sentinels: urls(sentinels),
            sentinel_master: "seckill".into(),
            key_prefix: "seckill".into(),
            limiter_timeout: Duration::from_millis(250),
            timeout: Duration::from_millis(500),
        }
    }

    #[test]
    fn a_cluster_and_sentinels_together_are_refused_and_each_alone_is_a_topology() {
        let both = Topology::new(&options(
            &["redis://127.0.0.1:7001"],
            &["redis://127.0.0.1:6393"],
        ));
        let refusal = format!("{:#}", both.err().expect("refused"));
        assert!(
            refusal.contains("SECKILL_REDIS_CLUSTER_NODES")
                && refusal.contains("SECKILL_REDIS_SENTINELS"),
            "{refusal}"
        );
        let single = Topology::new(&options(&[], &[])).expect("one server");
        assert!(matches!(single, Topology::Single { .. }));
        let cluster = Topology::new(&options(&["redis://127.0.0.1:7001"], &[])).expect("a cluster");
        assert!(matches!(cluster, Topology::Cluster { .. }));
        let sentinel =
            Topology::new(&options(&[], &["redis://127.0.0.1:6393"])).expect("sentinels");
        assert!(matches!(sentinel, Topology::Sentinel(_)));
    }

    /// No backoff between reconnects: the call that finds the connection gone starts one
    /// attempt, bounded by the connection timeout, and is sent again on it.
    #[test]
    fn the_one_server_is_reconnected_at_once_without_a_backoff() {
        let Topology::Single { config, .. } = Topology::new(&options(&[], &[])).expect("one")
        else {
            panic!("one server");
        };
        assert_eq!(config.number_of_retries(), 0);
        assert_eq!(
            config.connection_timeout(),
            Some(Duration::from_millis(500))
        );
    }

    #[test]
    fn only_a_request_that_never_left_or_whose_repeat_is_harmless_is_sent_again() {
        use std::io::{Error, ErrorKind};
        let error = |kind: ErrorKind| redis::RedisError::from(Error::from(kind));
        let refused = error(ErrorKind::ConnectionRefused);
        let socket_gone = error(ErrorKind::NotFound);
        for repeatable in [false, true] {
            assert!(sent_again(&refused, repeatable) && sent_again(&socket_gone, repeatable));
        }
        for kind in [
            ErrorKind::BrokenPipe,
            ErrorKind::ConnectionReset,
            ErrorKind::UnexpectedEof,
        ] {
            assert!(sent_again(&error(kind), true), "{kind:?}");
            assert!(!sent_again(&error(kind), false), "{kind:?}");
        }
        assert!(!sent_again(&error(ErrorKind::TimedOut), true));
    }
}
