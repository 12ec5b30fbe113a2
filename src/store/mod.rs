//! Connections to the two stores. Domain modules receive these handles; nothing here
//! knows about HTTP.

pub mod postgres_pool;
pub mod redis_store;
pub mod sentinel_master;

pub use redis_store::RedisStore;
