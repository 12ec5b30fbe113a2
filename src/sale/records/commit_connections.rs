//! The Postgres sessions one committer owns: opened on its own thread, used by one batch
//! at a time, never shared.
//!
//! Not a `PgPool`, for two reasons. A pool pings every connection as it goes back
//! (sqlx's `return_to_pool`: a `Sync` and its `ReadyForQuery`, on a task spawned for it),
//! which is one more exchange with Postgres for every batch; a committer knows when its
//! statement finished and has nothing to test. And a connection belongs to the runtime
//! that opened it: opened here, on the worker thread whose purchases it commits, its
//! socket wakes that thread and no other (see [`crate::sale::committer`]).
//!
//! What a pool did that is kept: a session idle past [`IDLE_LIMIT`] or older than
//! [`AGE_LIMIT`] is closed instead of reused (a restarted Postgres or a dropped NAT
//! entry does not leave a stale socket for long), and a session whose statement went
//! unanswered is never given back (the batch drops it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio::time::Instant;

/// A session idle this long is closed rather than reused.
pub const IDLE_LIMIT: Duration = Duration::from_secs(60);

/// A session this old is closed rather than reused.
pub const AGE_LIMIT: Duration = Duration::from_secs(30 * 60);

/// The sessions of every committer of an instance, counted for `/metrics`
/// (`seckill_db_pool_connections{pool="commit"}`).
#[derive(Debug, Default)]
pub struct CommitSessionCount {
    open: AtomicUsize,
    idle: AtomicUsize,
}

impl CommitSessionCount {
    /// Sessions open, in use or idle.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Sessions open and waiting for a batch.
    pub fn idle(&self) -> usize {
        self.idle.load(Ordering::Relaxed)
    }
}

/// One session, with its birth.
pub struct CommitSession {
    connection: PgConnection,
    opened: Instant,
    count: Arc<CommitSessionCount>,
}

impl CommitSession {
    /// The session, to run a statement on.
    pub fn connection(&mut self) -> &mut PgConnection {
        &mut self.connection
    }
}

impl Drop for CommitSession {
    fn drop(&mut self) {
        // The socket closes with the connection: the server ends the session once its
        // statement, if one is still running, has ended.
        self.count.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Up to `max` sessions of one committer, opened when a batch needs them.
pub struct CommitConnections {
    options: PgConnectOptions,
    max: usize,
    /// Open sessions between batches, and since when each is idle.
    idle: Vec<(CommitSession, Instant)>,
    count: Arc<CommitSessionCount>,
}

impl CommitConnections {
    /// No session yet; at most `max` (at least 1) at a time, counted in `count`.
    pub fn new(options: PgConnectOptions, max: usize, count: Arc<CommitSessionCount>) -> Self {
        Self {
            options,
            max: max.max(1),
            idle: Vec::new(),
            count,
        }
    }

    /// Most sessions one batch can use at once (its items run side by side).
    pub fn max(&self) -> usize {
        self.max
    }

    /// An idle session young enough to reuse, or a new one opened by `deadline`. Past
    /// the deadline it is [`sqlx::Error::PoolTimedOut`]: no session for the commit within
    /// its budget, counted as the commit pool's timeouts always were.
    pub async fn take(&mut self, deadline: Instant) -> Result<CommitSession, sqlx::Error> {
        let now = Instant::now();
        while let Some((session, since)) = self.idle.pop() {
            self.count.idle.fetch_sub(1, Ordering::Relaxed);
            if now.duration_since(since) < IDLE_LIMIT
                && now.duration_since(session.opened) < AGE_LIMIT
            {
                return Ok(session);
            }
        }
        self.open(deadline).await
    }

    /// A new session, opened by `deadline`, outside the `max` (the settle of a batch
    /// whose own session was lost).
    pub async fn open(&self, deadline: Instant) -> Result<CommitSession, sqlx::Error> {
        let connection =
            tokio::time::timeout_at(deadline, PgConnection::connect_with(&self.options))
                .await
                .unwrap_or(Err(sqlx::Error::PoolTimedOut))?;
        self.count.open.fetch_add(1, Ordering::Relaxed);
        Ok(CommitSession {
            connection,
            opened: Instant::now(),
            count: Arc::clone(&self.count),
        })
    }

    /// Gives a session whose last statement was answered back, for the next batch. More
    /// than `max` idle are closed.
    pub fn give_back(&mut self, session: CommitSession) {
        if self.idle.len() < self.max {
            self.count.idle.fetch_add(1, Ordering::Relaxed);
            self.idle.push((session, Instant::now()));
        }
    }
}

impl Drop for CommitConnections {
    fn drop(&mut self) {
        self.count
            .idle
            .fetch_sub(self.idle.len(), Ordering::Relaxed);
    }
}
