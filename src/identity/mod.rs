//! Who is calling: shoppers carry a bearer JWT (HS256 only) whose `sub` is their user id.
//!
//! [`TokenKeys`] issues and verifies shopper tokens; [`AdminGuard`] checks operators'
//! tokens within the sign-in lockout. The HTTP side (the `Shopper` extractor, the admin
//! middleware) is in `crate::http::auth`.

mod admin_tokens;
pub mod lockout;
mod queue_tokens;
mod token;

pub use admin_tokens::{Admin, AdminGuard, AdminTokens, SignInError};
pub use queue_tokens::{Pass, QueueTokenError, QueueTokens, Ticket};
pub use token::{IssuedToken, TokenKeys, TokenRules};
