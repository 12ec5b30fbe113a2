//! Fault injection for the chaos tests: points on the purchase and commit paths where a
//! test can make one user's purchase fail as if the process had died there.

use crate::domain::UserId;

/// A fault-injection point: with the `failpoints` feature a test configures `point` as
/// `return(<user id>)`, and this answers true for that user's purchase only, which then
/// fails as the point says (`sale::before_commit` / `sale::after_commit`: as if the
/// process had died, no repair, no cleanup; `sale::hang_after_commit`: the request
/// never finishes; `sale::commit_unanswered`: the COMMIT's answer is lost;
/// `committer::stall`: the committer waits before the batch holding the order). Without the feature this is a constant `false`.
#[cfg(feature = "failpoints")]
pub(crate) fn crash_point(point: &str, user: UserId) -> bool {
    fail::eval(point, |target| {
        target.as_deref() == Some(user.to_string().as_str())
    })
    .unwrap_or(false)
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn crash_point(_point: &str, _user: UserId) -> bool {
    false
}

/// A fault-injection point of the item's creation: with the `failpoints` feature,
/// `sale::after_create` configured as `return(<item name>)` makes the creation of an item
/// so named stop after its Postgres commit and before any Redis write, as if the process
/// had died there (keyed by the name, since tests share the process). Without the
/// feature, `false`.
#[cfg(feature = "failpoints")]
pub(crate) fn dies_after_create(name: &str) -> bool {
    fail::eval("sale::after_create", |target| {
        target.as_deref() == Some(name)
    })
    .unwrap_or(false)
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn dies_after_create(_name: &str) -> bool {
    false
}
