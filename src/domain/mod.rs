//! Domain types: parsed once at the edge, trusted everywhere after.

mod user_id;

pub use user_id::UserId;
