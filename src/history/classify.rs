//! What kind of offender a merged heavy hitter is: one documented rule per label
//! (docs/history.md, "Classification and alerts"), over the window's merge of the
//! instances' per-minute sketches ([`Merged`]).
//!
//! Every rule reads the **guaranteed** count (`count − error`: Space-Saving's counts are
//! upper bounds) and the **active minutes** (the minutes of the window the value was
//! seen in), so a value is labelled by what it surely did, at the rate it did it while it
//! was there. `others` is the largest distinct count one instance saw in one minute (the
//! distinct counts of two sketches cannot be added), a lower bound.
//!
//! An address is `shared_address`, else `queue_farmer`, else `burst_source`; a user is
//! `scripted_account`, else `queue_farmer`, else `burst_source`. Shared comes first: an
//! address many honest shoppers stand behind must be named so before anything else, since
//! the dashboard warns before blocking it.

use std::collections::BTreeMap;

use serde::Serialize;

/// Fewest distinct users behind an address for `shared_address`.
pub const SHARED_MIN_USERS: i64 = 10;
/// Most refusals per user per active minute for `shared_address`: each of them at a low
/// rate (one refusal every 10 s).
pub const SHARED_MAX_PER_USER_MINUTE: f64 = 6.0;
/// Fewest distinct addresses one user was refused from for `scripted_account`.
pub const SCRIPTED_MIN_ADDRESSES: i64 = 4;
/// Refusals per active minute from which a user or an address is a `burst_source` (two
/// a second, sustained over the minutes it was seen).
pub const BURST_PER_MINUTE: f64 = 120.0;
/// Queue joins per active minute from one address for `queue_farmer`.
pub const FARMER_JOINS_PER_MINUTE: f64 = 20.0;
/// Distinct accounts of one block of 64 consecutive user ids joining in one minute for
/// `queue_farmer`: half the block, accounts made in one batch queueing together.
pub const FARMER_BLOCK_ACCOUNTS: i64 = 32;

/// An offender's class: counts per label are the `offenders{label}` gauge, never a
/// user or an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    /// Many users behind one address, each at a low rate (a NAT, an office).
    SharedAddress,
    /// One user refused from many addresses.
    ScriptedAccount,
    /// Refusals above [`BURST_PER_MINUTE`].
    BurstSource,
    /// Many queue joins from one address, or many accounts of one block of ids.
    QueueFarmer,
}

impl Label {
    /// Every label, in the gauge's order.
    pub const ALL: [Label; 4] = [
        Self::SharedAddress,
        Self::ScriptedAccount,
        Self::BurstSource,
        Self::QueueFarmer,
    ];

    /// The label's word (the API's `label`, the gauge's `label`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SharedAddress => "shared_address",
            Self::ScriptedAccount => "scripted_account",
            Self::BurstSource => "burst_source",
            Self::QueueFarmer => "queue_farmer",
        }
    }
}

/// One value's merge over a window: the sums of `count`, `error` and `dimensions`, the
/// largest `others`, the minutes it was seen in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// The user id, the address, or the block of ids.
    pub value: String,
    /// Counted (an upper bound).
    pub count: i64,
    /// How much of `count` may be other values'.
    pub error: i64,
    /// Refusals by dimension.
    pub dimensions: BTreeMap<String, i64>,
    /// Distinct others (users behind an address, addresses of a user, accounts of a
    /// block), the largest one sketch saw.
    pub others: i64,
    /// The window's minutes it was seen in (at least 1).
    pub minutes: i64,
}

impl Merged {
    /// What it surely did: `count − error`.
    pub fn guaranteed(&self) -> i64 {
        (self.count - self.error).max(0)
    }

    /// Its guaranteed count per active minute.
    pub fn per_minute(&self) -> f64 {
        self.guaranteed() as f64 / self.minutes.max(1) as f64
    }
}

/// A refused address's label, given its queue joins in the window (kind `join_ip`).
pub fn address_label(refused: &Merged, joins: Option<&Merged>) -> Option<Label> {
    if refused.others >= SHARED_MIN_USERS
        && refused.per_minute() / refused.others as f64 <= SHARED_MAX_PER_USER_MINUTE
    {
        Some(Label::SharedAddress)
    } else if joins.is_some_and(farming_address) {
        Some(Label::QueueFarmer)
    } else {
        burst(refused)
    }
}

/// A refused user's label, given the joins of its block of ids (kind `join_block`).
pub fn user_label(refused: &Merged, block: Option<&Merged>) -> Option<Label> {
    if refused.others >= SCRIPTED_MIN_ADDRESSES {
        Some(Label::ScriptedAccount)
    } else if block.is_some_and(farming_block) {
        Some(Label::QueueFarmer)
    } else {
        burst(refused)
    }
}

fn burst(refused: &Merged) -> Option<Label> {
    (refused.per_minute() >= BURST_PER_MINUTE).then_some(Label::BurstSource)
}

/// Whether an address's joins (kind `join_ip`) farm the queue.
pub fn farming_address(joins: &Merged) -> bool {
    joins.per_minute() >= FARMER_JOINS_PER_MINUTE
}

/// Whether a block's joins (kind `join_block`) farm the queue.
pub fn farming_block(joins: &Merged) -> bool {
    joins.others >= FARMER_BLOCK_ACCOUNTS
}

/// Whether `user` falls in `block` (`<first id>-<last id>`).
pub fn in_block(user: i64, block: &str) -> bool {
    let Some((first, last)) = block.split_once('-') else {
        return false;
    };
    match (first.parse::<i64>(), last.parse::<i64>()) {
        (Ok(first), Ok(last)) => (first..=last).contains(&user),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hitter(count: i64, error: i64, others: i64, minutes: i64) -> Merged {
        Merged {
            value: "v".into(),
            count,
            error,
            others,
            minutes,
            ..Merged::default()
        }
    }

    #[test]
    fn many_users_each_slow_behind_one_address_is_a_shared_address_even_when_the_total_bursts() {
        // 40 users, 200 refusals a minute in all: 5 each, under 6.
        let nat = hitter(400, 0, 40, 2);
        assert_eq!(address_label(&nat, None), Some(Label::SharedAddress));
        // The same total from 9 users: not shared, a burst.
        assert_eq!(
            address_label(&hitter(400, 0, 9, 2), None),
            Some(Label::BurstSource)
        );
        // 10 users at 7 a minute each: not low enough to be shared, nor a burst.
        assert_eq!(address_label(&hitter(70, 0, 10, 1), None), None);
    }

    #[test]
    fn a_user_refused_from_four_addresses_is_a_scripted_account() {
        assert_eq!(
            user_label(&hitter(8, 0, 4, 1), None),
            Some(Label::ScriptedAccount)
        );
        assert_eq!(user_label(&hitter(8, 0, 3, 1), None), None);
    }

    #[test]
    fn a_burst_is_counted_on_what_surely_happened_per_active_minute() {
        assert_eq!(
            user_label(&hitter(120, 0, 1, 1), None),
            Some(Label::BurstSource)
        );
        // Over by its error: 119 surely.
        assert_eq!(user_label(&hitter(125, 6, 1, 1), None), None);
        // 240 over two active minutes is 120 a minute.
        assert_eq!(
            user_label(&hitter(240, 0, 1, 2), None),
            Some(Label::BurstSource)
        );
        assert_eq!(address_label(&hitter(239, 0, 1, 2), None), None);
    }

    #[test]
    fn joins_from_one_address_or_one_block_of_accounts_make_a_queue_farmer() {
        let quiet = hitter(10, 0, 1, 1);
        assert_eq!(
            address_label(&quiet, Some(&hitter(40, 0, 30, 2))),
            Some(Label::QueueFarmer)
        );
        assert_eq!(address_label(&quiet, Some(&hitter(39, 0, 30, 2))), None);
        assert_eq!(
            user_label(&quiet, Some(&hitter(32, 0, 32, 1))),
            Some(Label::QueueFarmer)
        );
        assert_eq!(user_label(&quiet, Some(&hitter(64, 0, 31, 1))), None);
        assert!(in_block(70, "64-127") && !in_block(128, "64-127") && !in_block(1, "x"));
    }
}
