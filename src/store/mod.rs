//! Connections to the two stores. Domain modules receive these handles; nothing here
//! knows about HTTP.

pub mod postgres;
pub mod redis;

pub use self::redis::RedisStore;
