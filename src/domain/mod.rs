//! Domain types: parsed once at the edge, trusted everywhere after.

mod client_id;
mod client_ip;
mod user_id;

pub use client_id::{ClientId, InvalidClientId};
pub use client_ip::ClientIp;
pub use user_id::UserId;
