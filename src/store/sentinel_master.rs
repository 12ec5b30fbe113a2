//! Redis Sentinel: a connection to the master the sentinels name, found again when it
//! fails.
//!
//! **Whose code does what.** Finding the master is the `redis` crate's
//! (`redis::sentinel::Sentinel::async_master_for`): it asks the sentinels in turn for
//! `SENTINEL MASTERS`, skips a master they flag as down, and checks with `ROLE` that
//! the server they name calls itself master (a restarted old master does, for a moment,
//! before the sentinels turn it into a replica). What it hands back is a client pinned
//! to that address, and the crate has no connection that follows a failover. That part
//! is ours ([`SentinelMaster`]):
//!
//! - a reply that says the master is gone or is not master any more (an I/O error: the
//!   socket was reset or closed, as it is when the master dies or when the sentinels
//!   demote it, since they kill its clients' connections; `READONLY`; `MASTERDOWN`)
//!   drops the connection, and the next call asks the sentinels again;
//! - a call abandoned before any reply (its caller's timeout) raises a doubt: the next
//!   call asks the sentinels whether the master moved, and reconnects only if it did. A
//!   master that hangs rather than dies (a partition, a stopped process) answers no call
//!   with an error, so without this its connection would never be dropped;
//! - one lookup at a time per connection, and none within `RETRY_AFTER` of a failed
//!   one: while no master is known (the failover's gap), calls fail at once with the
//!   last lookup's error instead of each asking three sentinels and queueing behind the
//!   others. That is the sale's fail-closed answer, given fast.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind,
    IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};
use secrecy::{ExposeSecret, SecretString};

/// How long after a failed lookup calls fail at once rather than ask the sentinels
/// again. Bounds the sentinels' load to ten lookups a second per thread during a
/// failover, and delays the first call after the promotion by at most this.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// Where the sentinels are, the master's name, and how to reach the master.
#[derive(Clone)]
pub struct SentinelSetup {
    sentinels: Vec<ConnectionInfo>,
    master_name: String,
    /// The master's credentials and database: those of `REDIS_URL`, whose address is
    /// not used (the sentinels give it).
    node: SentinelNodeConnectionInfo,
    db: i64,
    /// `REDIS_URL`, the template of the URLs given to the sold-out subscriber.
    url: SecretString,
    config: AsyncConnectionConfig,
}

impl SentinelSetup {
    /// Checks the URLs; connects to nothing.
    pub fn new(
        sentinels: &[SecretString],
        master_name: &str,
        url: &SecretString,
    ) -> anyhow::Result<Self> {
        let sentinels = sentinels
            .iter()
            .map(|sentinel| sentinel.expose_secret().into_connection_info())
            .collect::<RedisResult<Vec<_>>>()
            .context("SECKILL_REDIS_SENTINELS is not a list of Redis URLs")?;
        let master = url.expose_secret().into_connection_info().context(
            "REDIS_URL (the master's credentials under Sentinel) is not a valid Redis URL",
        )?;
        anyhow::ensure!(
            !master_name.trim().is_empty(),
            "SECKILL_REDIS_SENTINEL_MASTER is empty: the sentinels know the master by a name"
        );
        // As the one server's manager: a connect that takes longer than this will not
        // succeed within a call's budget anyway; a reply that takes longer than the
        // response timeout drops the connection (an I/O error, see the module docs).
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        Ok(Self {
            sentinels,
            master_name: master_name.trim().to_string(),
            node: SentinelNodeConnectionInfo::default()
                .set_redis_connection_info(master.redis_settings().clone()),
            db: master.redis_settings().db(),
            url: url.clone(),
            config,
        })
    }

    fn sentinel(&self) -> RedisResult<Sentinel> {
        Sentinel::build(self.sentinels.clone())
    }

    /// The master the sentinels name now, and a connection to it.
    async fn find(&self, sentinel: &mut Sentinel) -> RedisResult<(String, MultiplexedConnection)> {
        let client = sentinel
            .async_master_for(&self.master_name, Some(&self.node))
            .await?;
        let address = client.get_connection_info().addr().to_string();
        let conn = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        Ok((address, conn))
    }

    /// The URLs of the master and of its replicas, as the sentinels name them now, with
    /// `REDIS_URL`'s credentials: for a subscriber. A `PUBLISH` on the master reaches
    /// the subscribers of its replicas too (it is replicated), so the subscriber may
    /// move from one to the next when its server dies, the promoted replica among them.
    pub async fn node_urls(&self) -> anyhow::Result<Vec<SecretString>> {
        let mut sentinel = self.sentinel()?;
        let master = sentinel
            .async_master_for(&self.master_name, Some(&self.node))
            .await
            .context("asking the sentinels for the master")?;
        // No replica known is no reason to go without the master.
        let replicas = sentinel
            .async_get_replica_clients(&self.master_name, Some(&self.node))
            .await
            .unwrap_or_default();
        let url = url::Url::parse(self.url.expose_secret()).context("REDIS_URL is not a URL")?;
        Ok(std::iter::once(&master)
            .chain(&replicas)
            .filter_map(|client| with_address(&url, client))
            .collect())
    }
}

/// `url` with `client`'s host and port.
fn with_address(url: &url::Url, client: &Client) -> Option<SecretString> {
    let ConnectionAddr::Tcp(host, port) = client.get_connection_info().addr() else {
        return None;
    };
    let mut url = url.clone();
    match host.parse::<IpAddr>() {
        Ok(ip) => url.set_ip_host(ip).ok()?,
        Err(_) => url.set_host(Some(host)).ok()?,
    }
    url.set_port(Some(*port)).ok()?;
    Some(SecretString::from(url.to_string()))
}

/// One thread's connection to the master the sentinels name (see the module docs);
/// clones share it.
#[derive(Clone)]
pub struct SentinelMaster(Arc<Link>);

struct Link {
    setup: SentinelSetup,
    /// The sentinels, behind the lock that makes lookups one at a time: it is held
    /// across the lookup on purpose, so the calls that wait for it get its answer
    /// instead of each asking again.
    lookup: tokio::sync::Mutex<Lookup>,
    /// The master in use; a plain lock, never held across an `.await`.
    current: Mutex<Current>,
}

struct Lookup {
    sentinel: Sentinel,
    /// When the last lookup failed, and why: calls within [`RETRY_AFTER`] get this.
    failed: Option<(Instant, RedisError)>,
}

#[derive(Default)]
struct Current {
    master: Option<Master>,
    /// Counts the masters found, so that a failure seen on an old connection never
    /// drops a newer one.
    found: u64,
    /// A call on the current master was abandoned without a reply.
    doubted: bool,
}

#[derive(Clone)]
struct Master {
    generation: u64,
    address: String,
    conn: MultiplexedConnection,
}

impl SentinelMaster {
    /// Asks the sentinels for the master and connects to it.
    pub async fn connect(setup: SentinelSetup) -> RedisResult<Self> {
        let link = Self(Arc::new(Link {
            lookup: tokio::sync::Mutex::new(Lookup {
                sentinel: setup.sentinel()?,
                failed: None,
            }),
            setup,
            current: Mutex::default(),
        }));
        link.master().await?;
        Ok(link)
    }

    /// The master to send the next call to, asking the sentinels when none is known or
    /// the current one is in doubt.
    async fn master(&self) -> RedisResult<Master> {
        let link = &self.0;
        let (known, doubted) = {
            let current = link.current();
            (current.master.clone(), current.doubted)
        };
        match known {
            Some(master) if !doubted => Ok(master),
            // One call checks; the others go on with the master they have meanwhile.
            Some(master) => match link.lookup.try_lock() {
                Ok(mut lookup) => Ok(link.check(&mut lookup, master).await),
                Err(_) => Ok(master),
            },
            None => {
                let mut lookup = link.lookup.lock().await;
                // Found by the lookup this call waited for?
                if let Some(master) = link.current().master.clone() {
                    return Ok(master);
                }
                link.find(&mut lookup).await
            }
        }
    }

    /// Runs one request on the master, dropping or doubting it as the reply says.
    async fn run<T>(
        &self,
        request: impl AsyncFnOnce(&mut MultiplexedConnection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let mut master = self.master().await?;
        let watch = Watch {
            link: &self.0,
            generation: master.generation,
            replied: false,
        };
        let result = request(&mut master.conn).await;
        watch.replied(&result);
        result
    }
}

impl Link {
    fn current(&self) -> MutexGuard<'_, Current> {
        // A panic while holding it cannot leave it half-written: every write is one
        // assignment.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks the sentinels, unless the last lookup failed less than [`RETRY_AFTER`] ago.
    async fn find(&self, lookup: &mut Lookup) -> RedisResult<Master> {
        if let Some((at, error)) = &lookup.failed {
            if at.elapsed() < RETRY_AFTER {
                return Err(error.clone());
            }
        }
        match self.setup.find(&mut lookup.sentinel).await {
            Ok((address, conn)) => {
                lookup.failed = None;
                Ok(self.install(address, conn))
            }
            Err(error) => {
                tracing::debug!(%error, "no Redis master from the sentinels");
                lookup.failed = Some((Instant::now(), error.clone()));
                Err(error)
            }
        }
    }

    /// Whether the master in doubt is still the one the sentinels name: keeps it if so
    /// (or if they cannot say), moves to the new one if not.
    async fn check(&self, lookup: &mut Lookup, master: Master) -> Master {
        if lookup
            .failed
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < RETRY_AFTER)
        {
            return master;
        }
        match self.setup.find(&mut lookup.sentinel).await {
            Ok((address, _)) if address == master.address => {
                lookup.failed = None;
                let mut current = self.current();
                if current.master.as_ref().map(|m| m.generation) == Some(master.generation) {
                    current.doubted = false;
                }
                master
            }
            Ok((address, conn)) => {
                lookup.failed = None;
                self.install(address, conn)
            }
            Err(error) => {
                lookup.failed = Some((Instant::now(), error));
                master
            }
        }
    }

    fn install(&self, address: String, conn: MultiplexedConnection) -> Master {
        let mut current = self.current();
        current.found += 1;
        let master = Master {
            generation: current.found,
            address,
            conn,
        };
        tracing::info!(redis.master = %master.address, "using the Redis master the sentinels name");
        current.master = Some(master.clone());
        current.doubted = false;
        master
    }

    /// Drops the master of `generation` after a reply that says it is gone.
    fn forget(&self, generation: u64, error: &RedisError) {
        let mut current = self.current();
        if let Some(master) = current.master.take_if(|m| m.generation == generation) {
            tracing::warn!(redis.master = %master.address, %error, "lost the Redis master; asking the sentinels again");
        }
    }

    fn doubt(&self, generation: u64) {
        let mut current = self.current();
        if current.master.as_ref().map(|m| m.generation) == Some(generation) {
            current.doubted = true;
        }
    }
}

/// One request on one master: what its reply, or the lack of one, says about it.
struct Watch<'a> {
    link: &'a Link,
    generation: u64,
    replied: bool,
}

impl Watch<'_> {
    fn replied<T>(mut self, result: &RedisResult<T>) {
        self.replied = true;
        if let Err(error) = result {
            if means_another_master(error) {
                self.link.forget(self.generation, error);
            }
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        if !self.replied {
            self.link.doubt(self.generation);
        }
    }
}

/// A reply that says this connection will not reach the master again: the socket is
/// gone (or timed out), or the server is not, or no longer, a usable master.
fn means_another_master(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_unrecoverable_error()
        || matches!(
            error.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

impl ConnectionLike for SentinelMaster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.run(async move |conn| conn.req_packed_command(cmd).await))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.run(async move |conn| conn.req_packed_commands(cmd, offset, count).await))
    }

    fn get_db(&self) -> i64 {
        self.0.setup.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(url: &str) -> Client {
        Client::open(url).unwrap()
    }

    #[test]
    fn a_subscriber_url_keeps_the_credentials_and_takes_the_address() {
        let url = url::Url::parse("redis://user:p%40ss@127.0.0.1:6380/2").unwrap();
        let moved = with_address(&url, &client("redis://10.0.0.7:7001")).unwrap();
        assert_eq!(moved.expose_secret(), "redis://user:p%40ss@10.0.0.7:7001/2");
        let v6 = with_address(&url, &client("redis://[::1]:7002")).unwrap();
        assert_eq!(v6.expose_secret(), "redis://user:p%40ss@[::1]:7002/2");
        let named = with_address(&url, &client("redis://redis-a:6379")).unwrap();
        assert_eq!(named.expose_secret(), "redis://user:p%40ss@redis-a:6379/2");
    }

    /// The error a server's reply `-<line>` becomes.
    fn server_error(line: &str) -> RedisError {
        let reply = redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap();
        reply.extract_error().unwrap_err()
    }

    #[test]
    fn a_gone_socket_or_a_demoted_master_means_another_master_and_a_script_error_does_not() {
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(means_another_master(&reset));
        assert!(means_another_master(&server_error(
            "READONLY You can't write against a read only replica."
        )));
        assert!(means_another_master(&server_error(
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."
        )));
        assert!(!means_another_master(&server_error(
            "ERR Error running script"
        )));
        assert!(!means_another_master(&server_error(
            "NOSCRIPT No matching script"
        )));
    }

    #[test]
    fn a_setup_needs_urls_and_a_master_name() {
        let url = SecretString::from("redis://127.0.0.1:6380");
        let sentinels = [SecretString::from("redis://127.0.0.1:26379")];
        assert!(SentinelSetup::new(&sentinels, "seckill", &url).is_ok());
        assert!(SentinelSetup::new(&sentinels, " ", &url).is_err());
        assert!(SentinelSetup::new(&[SecretString::from("nope://x")], "seckill", &url).is_err());
    }
}
