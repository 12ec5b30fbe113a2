//! Domain types: parsed once at the edge, trusted everywhere after.

mod bounds;
mod client_id;
mod client_ip;
mod idempotency_key;
mod item_id;
mod user_id;

pub use bounds::{is_printable, is_storable, STORABLE_RANGE};
pub use client_id::{ClientId, InvalidClientId};
pub use client_ip::ClientIp;
pub use idempotency_key::{IdempotencyKey, InvalidIdempotencyKey};
pub use item_id::{InvalidItemId, ItemId};
pub use user_id::UserId;
