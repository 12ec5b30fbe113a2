//! Connections to the two stores. Domain modules receive these handles; nothing here
//! knows about HTTP.

pub mod postgres_pool;
pub mod redis_store;
pub mod sentinel_master;

pub use redis_store::RedisStore;

/// Whether `error` (or a cause in its chain) says a store could not be reached: no
/// pooled connection in time, a refused, broken or ended connection, a Postgres that
/// does not accept connections now, a Redis call that timed out or lost its server.
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

/// A Redis error that says the server could not be reached or went away, not that the
/// command was wrong.
fn redis_gone(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_timeout()
}
