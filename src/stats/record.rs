//! The history stream's format: what one instance's stats flush appends once a second
//! (`<prefix>:{stats}:history`, a Redis Stream, one field `r` holding this record as
//! JSON), and what the fold (`crate::history`) reads back into Postgres.
//!
//! A record carries what **grew** on its instance since the previous record, so records
//! add up. It is identified by `(instance, second)`, the fold's idempotency key: an
//! instance's `second` strictly increases from record to record (a flush that lands in the
//! same wall second as the previous one takes the next second), so no two records of one
//! instance share it, and a redelivered record is recognised and skipped.
//!
//! Every field is added by a later version with `#[serde(default)]`: a record of an older
//! or newer version still folds, without what it lacks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The stream's key: under the `{stats}` hash tag, with the per-second buckets, so the
/// flush stays one pipeline in one slot on a Redis Cluster.
pub fn stream_key(prefix: &str) -> String {
    format!("{prefix}:{{stats}}:history")
}

/// The consumer group every instance's fold reads the stream in.
pub const GROUP: &str = "history";

/// The stream entry's one field, holding the record as JSON.
pub const FIELD: &str = "r";

/// The upper bounds of the room's wait buckets, in seconds: an admission after a wait of
/// `w` counts in the first bucket whose bound is at least `w`, or in the last
/// (`RoomCounts::waits` has one more entry than this: over an hour). Defined in the
/// tally, below the room that counts the waits.
pub use crate::tally::per_item::WAIT_BUCKETS_SECS;

/// One instance's second.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SecondRecord {
    /// The writing instance, random per process: a restarted instance is a new one.
    pub instance: String,
    /// The unix second of the flush; strictly increasing per instance (module docs).
    pub second: i64,
    /// The limiter's decisions that moved since the previous record, every policy.
    pub decisions: Vec<DecisionCount>,
    /// Per item, the sale's outcomes and the room's counts that moved.
    pub items: Vec<ItemCounts>,
    /// A sample of individual refusals (one in `history.sample_every`).
    pub samples: Vec<RefusalSample>,
    /// Sampled refusals this instance dropped since the previous record (past
    /// `history.samples_per_second`).
    pub samples_dropped: i64,
    /// On the first record after a minute ended: that minute's heavy hitters.
    pub minute: Option<MinuteSketch>,
}

/// How often one policy's rule decided one way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionCount {
    /// The policy.
    pub policy: String,
    /// The rule (dimension); empty for `fail_open`, which no rule decided.
    pub rule: String,
    /// `pass`, `reject`, `local` (a refusal the denial cache answered: also counted as a
    /// `reject`), `shadow` (a shadow rule would have refused), `near` (an admission that
    /// left the rule above 80 % of its quota), `fail_open`, `blocked` (403 `BLOCKED`,
    /// before the limiter; rule empty).
    pub outcome: String,
    /// How many.
    pub count: i64,
}

/// What happened to one item on one instance that second.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ItemCounts {
    /// The item's id.
    pub item: i64,
    /// Purchases by outcome: the `vocabulary::Outcome` words (`created`, `sold_out`, …),
    /// except a limiter refusal, which is `rejected:<rule>` (the rule that refused).
    pub outcomes: BTreeMap<String, i64>,
    /// The waiting room's counts, when its room is on.
    pub room: RoomCounts,
}

/// One item's waiting room over one record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RoomCounts {
    /// Shoppers who joined the queue.
    pub joins: i64,
    /// Shoppers admitted (offered a pass).
    pub admissions: i64,
    /// Shoppers who left, or whose pass expired unused.
    pub abandons: i64,
    /// Admissions by wait from join to admission, one entry per [`WAIT_BUCKETS_SECS`]
    /// bound and one over the last; empty when nothing was admitted.
    pub waits: Vec<i64>,
}

/// One refusal, kept whole. Personal data: readable only through the admin API, kept
/// `history.sample_retention_days`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusalSample {
    /// When, in unix milliseconds.
    pub at_ms: i64,
    /// The policy that refused.
    pub policy: String,
    /// The rule (dimension) that refused.
    pub rule: String,
    /// The shopper, when the route knows one.
    pub user: Option<i64>,
    /// The address as the limiter keys it (an IPv6 address by its /64).
    pub ip: Option<String>,
    /// The item, on the sale's routes.
    pub item: Option<i64>,
}

/// One instance's heavy hitters over one minute (Space-Saving: the counts are upper
/// bounds, over by at most `error`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MinuteSketch {
    /// The unix second the minute starts at.
    pub minute: i64,
    /// Refused users, by user id (decimal).
    pub users: Vec<Hitter>,
    /// Refused addresses, as the limiter keys them.
    pub addresses: Vec<Hitter>,
    /// Queue joins by address, where a room is on.
    pub join_addresses: Vec<Hitter>,
    /// Queue joins by block of user ids (`<first id>-<last id>`, 64 ids a block:
    /// accounts made in one batch).
    pub join_blocks: Vec<Hitter>,
}

/// One monitored value of a sketch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Hitter {
    /// The user id, the address, or the block.
    pub value: String,
    /// The item, on the sale's routes; 0 for no item.
    pub item: i64,
    /// Its count (an upper bound).
    pub count: i64,
    /// How much of `count` may belong to values it evicted.
    pub error: i64,
    /// Its refusals by dimension (rule), of the refusals counted exactly.
    pub dimensions: BTreeMap<String, i64>,
    /// Distinct others seen with it, capped: users behind an address, addresses used by
    /// a user, users of a block.
    pub others: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_without_later_fields_still_reads() {
        let record: SecondRecord =
            serde_json::from_str(r#"{"instance":"a1","second":7,"unknown":1}"#).unwrap();
        assert_eq!((record.instance.as_str(), record.second), ("a1", 7));
        assert_eq!(record.minute, None);
    }
}
