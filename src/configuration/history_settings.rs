//! The history's settings: the decision stream, its fold into Postgres, the offenders'
//! sketches and the operator's blocks (`SECKILL_HISTORY__…`; docs/history.md).

use serde::Deserialize;

/// How much the sale remembers, for how long, and how much of it a client can cause.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct HistorySettings {
    /// One refusal in this many is kept with its user, address, dimension and rule (the
    /// refusal samples, personal data); 0 keeps none.
    pub sample_every: u64,
    /// The most sampled refusals one instance keeps for one second's record; more that
    /// second are dropped and counted.
    pub samples_per_second: usize,
    /// The stream's hard cap, in records (`MAXLEN`): a record that finds the backlog at
    /// the cap (Postgres away, say) is dropped and counted, never an unfolded one. 0
    /// turns the history off: no record is written.
    pub stream_max_len: u64,
    /// Entries per read of the fold, and its pause when the stream is empty.
    pub fold_batch: usize,
    /// How often the fold reads the stream; 0: this instance does not fold.
    pub fold_every_ms: u64,
    /// A consumer's entry unacknowledged this long is claimed by another (`XAUTOCLAIM`).
    pub claim_idle_ms: u64,
    /// Per-minute rows are kept this long.
    pub retention_days: u32,
    /// Refusal samples (user ids and addresses) are kept this long: shorter, since they
    /// are personal data.
    pub sample_retention_days: u32,
    /// The most distinct users, and addresses, one instance's sketch follows per minute.
    pub sketch_capacity: usize,
    /// `GET /admin/api/history`: the longest range one answer may cover, in days.
    pub max_range_days: u32,
    /// `GET /admin/api/history`: the most rows one answer may hold.
    pub max_rows: usize,
    /// The longest block an operator may set, in seconds.
    pub block_max_secs: u64,
    /// The most blocks in force at once.
    pub blocks_max: usize,
    /// How often each instance asks Redis whether the blocks changed (one script call),
    /// besides a change's own instance, which applies it at once.
    pub block_poll_ms: u64,
}

impl Default for HistorySettings {
    fn default() -> Self {
        Self {
            sample_every: 100,
            samples_per_second: 100,
            stream_max_len: 100_000,
            fold_batch: 200,
            fold_every_ms: 1_000,
            claim_idle_ms: 30_000,
            retention_days: 90,
            sample_retention_days: 7,
            sketch_capacity: 256,
            max_range_days: 31,
            max_rows: 50_000,
            block_max_secs: 7 * 86_400,
            blocks_max: 10_000,
            block_poll_ms: 200,
        }
    }
}
