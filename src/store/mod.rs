//! Connections to the two stores. Domain modules receive these handles; nothing here
//! knows about HTTP.

pub mod postgres_pool;
pub mod redis_store;
pub mod sentinel_master;
pub mod version_key;

pub use redis_store::RedisStore;
pub use version_key::VersionKey;

/// Whether `error` (or a cause in its chain) says a store could not be reached: no
/// pooled connection in time, a refused, broken or ended connection, a Postgres that
/// does not accept connections now, a Redis call that timed out, lost its server or
/// found it loading or failing over.
/// Such a failure is no one's mistake and passes: the HTTP layer answers it 503, to be
/// retried, where any other failure is a 500.
pub fn is_unreachable(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        if let Some(error) = cause.downcast_ref::<sqlx::Error>() {
            return match error {
                sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Io(_)
                | sqlx::Error::Tls(_) => true,
                // 08: connection exception; 53: insufficient resources; 57: operator
                // intervention (a terminated session, a shutdown, a start-up); 55000:
                // the database does not accept connections now.
                sqlx::Error::Database(db) => db.code().is_some_and(|code| {
                    ["08", "53", "57"]
                        .iter()
                        .any(|class| code.starts_with(class))
                        || code == "55000"
                }),
                _ => false,
            };
        }
        match cause.downcast_ref::<redis_store::RedisCallError>() {
            Some(redis_store::RedisCallError::Timeout { .. }) => true,
            Some(redis_store::RedisCallError::Failed { source, .. }) => redis_gone(source),
            None => cause
                .downcast_ref::<redis::RedisError>()
                .is_some_and(redis_gone),
        }
    })
}

/// A Redis error that says the server could not be reached, went away or cannot serve
/// yet (loading its dataset after a restart, a cluster or a master in a failover), not
/// that the command was wrong.
fn redis_gone(error: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_timeout()
        || matches!(
            error.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
            )
        )
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    use super::*;

    fn redis_error(kind: ServerErrorKind) -> anyhow::Error {
        anyhow::Error::from(RedisError::from((
            ErrorKind::Server(kind),
            "from the server",
        )))
        .context("reading the live stats")
    }

    /// A Redis that restarts answers `LOADING` until its dataset is in memory (seen in
    /// `make soak`: `GET /admin/api/stats` answered 500 then); a cluster or a Sentinel
    /// setup in a failover answers `CLUSTERDOWN`, `TRYAGAIN` or `MASTERDOWN`. Each passes.
    #[test]
    fn a_redis_that_is_loading_or_failing_over_is_unreachable_for_now() {
        for kind in [
            ServerErrorKind::BusyLoading,
            ServerErrorKind::ClusterDown,
            ServerErrorKind::TryAgain,
            ServerErrorKind::MasterDown,
        ] {
            assert!(is_unreachable(&redis_error(kind)), "{kind:?}");
        }
    }

    #[test]
    fn a_script_error_is_not_unreachable() {
        for kind in [ServerErrorKind::NoScript, ServerErrorKind::ExecAbort] {
            assert!(!is_unreachable(&redis_error(kind)), "{kind:?}");
        }
    }
}
