//! The fields of a stats bucket: the format stored in Redis, shared by every instance's
//! version, written by `stats` and read by it and by `series` (see `stats`'s docs).

pub(super) const PASS: &str = "pass:";
pub(super) const REJECT: &str = "reject:";
pub(super) const LOCAL: &str = "local:";
pub(super) const SHADOW: &str = "shadow:";
pub(super) const NEAR: &str = "near:";
pub(super) const ORDERS: &str = "orders";
pub(super) const OUTCOME: &str = "outcome:";
pub(super) const FAIL_OPEN: &str = "fail_open";
pub(super) const STOCK: &str = "stock:";
