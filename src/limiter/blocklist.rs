//! The operator's blocks as this instance holds them: who is refused 403 `BLOCKED`
//! before any limiter decision, in process, with no Redis call.
//!
//! The blocks live in Postgres (`history::blocks` writes them, with their audit, and
//! reloads this table on every instance when their version moves). Here is only the
//! lookup, swapped whole on each reload, so a request reads one snapshot without a
//! lock: an empty table (no block in force, the usual case) costs a pointer load and two
//! empty-map probes. Each entry carries its end, checked at the lookup, so a block lifts
//! at its `until` on every instance even before a reload sweeps it.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::domain::{ClientIp, UserId};
use crate::metrics::Metrics;
use crate::tally::Counted;

/// What one reload installs: users and addresses (as the limiter keys them: an IPv6
/// address by its /64) with the unix millisecond their block ends at.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Blocks {
    /// The version these were read at (`history::blocks`: 0 before any change).
    pub version: i64,
    /// Blocked users.
    pub users: HashMap<UserId, i64>,
    /// Blocked addresses, normalised ([`ClientIp`]).
    pub ips: HashMap<ClientIp, i64>,
}

/// The table every route consults where it builds its caller (`http::rate_limit::caller`).
pub struct Blocklist {
    blocks: ArcSwap<Blocks>,
    /// Counts each refusal twice, as every decision is: `blocked_total{policy}` for
    /// scrapes, and the tally's cell for the history (`blocked` in the second's record).
    metrics: Arc<Metrics>,
}

impl Blocklist {
    /// An empty table counting its refusals on `metrics` (`blocked` and the tally).
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            blocks: ArcSwap::from_pointee(Blocks::default()),
            metrics,
        }
    }

    /// Installs `blocks` whole in place of what was there, unless what is there was read
    /// at a later version (two reloads that overlap install the newer); answers the
    /// version in force.
    pub fn replace(&self, blocks: Blocks) -> i64 {
        let new = Arc::new(blocks);
        let previous = self.blocks.rcu(|current| {
            if current.version > new.version {
                Arc::clone(current)
            } else {
                Arc::clone(&new)
            }
        });
        previous.version.max(new.version)
    }

    /// The version of the blocks in force here.
    pub fn version(&self) -> i64 {
        self.blocks.load().version
    }

    /// Whether `user` or `ip` is blocked now; a refusal is counted under `policy`, the
    /// policy the request would have been decided by. With no block in force it reads
    /// no clock.
    pub fn refuses(&self, policy: &str, user: Option<UserId>, ip: ClientIp) -> bool {
        self.refuses_at(policy, user, ip, || chrono::Utc::now().timestamp_millis())
    }

    /// [`Self::refuses`] at the unix millisecond `now_ms` answers, asked only on a match.
    pub fn refuses_at(
        &self,
        policy: &str,
        user: Option<UserId>,
        ip: ClientIp,
        now_ms: impl FnOnce() -> i64,
    ) -> bool {
        let blocks = self.blocks.load();
        if blocks.users.is_empty() && blocks.ips.is_empty() {
            return false;
        }
        let found = blocks
            .ips
            .get(&ip)
            .into_iter()
            .chain(user.and_then(|user| blocks.users.get(&user)))
            .max()
            .copied();
        let refused = found.is_some_and(|until| until > now_ms());
        if refused {
            // A blocked caller's requests are few next to a stampede's: the cell's lookup
            // is not resolved ahead as the limiter's are.
            self.metrics.blocked.with_label_values(&[policy]).inc();
            let policy = policy.to_string();
            self.metrics.tally.cell(Counted::Blocked { policy }).add();
        }
        refused
    }

    /// How many blocks this instance holds (expired ones until the next reload).
    pub fn len(&self) -> usize {
        let blocks = self.blocks.load();
        blocks.users.len() + blocks.ips.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Arc<Metrics> {
        Arc::new(Metrics::new().expect("the metrics"))
    }

    #[test]
    fn an_older_reload_never_replaces_a_newer_one() {
        let list = Blocklist::new(metrics());
        let at = |version| Blocks {
            version,
            ..Blocks::default()
        };
        assert_eq!(list.replace(at(3)), 3);
        assert_eq!(list.replace(at(2)), 3);
        assert_eq!(list.version(), 3);
        assert_eq!(list.replace(at(4)), 4);
    }

    #[test]
    fn a_block_refuses_its_user_or_its_64_until_it_ends_and_counts_by_policy() {
        let list = Blocklist::new(metrics());
        let ip = |s: &str| ClientIp::new(s.parse().expect("an address"));
        let user = UserId::try_from(7).ok();
        let mut blocks = Blocks::default();
        blocks.ips.insert(ip("2001:db8:1:2::5"), 2_000);
        blocks
            .users
            .insert(UserId::try_from(7).expect("a user"), 1_000);
        list.replace(blocks);
        // Another address of the same /64.
        assert!(list.refuses_at("seckill", None, ip("2001:db8:1:2:ffff::1"), || 1_500));
        assert!(!list.refuses_at("seckill", None, ip("2001:db8:1:3::1"), || 1_500));
        assert!(list.refuses_at("seckill", user, ip("192.0.2.1"), || 999));
        assert!(!list.refuses_at("seckill", user, ip("192.0.2.1"), || 1_000));
        assert!(!list.refuses_at("seckill", None, ip("2001:db8:1:2::5"), || 2_000));
        assert_eq!(
            list.metrics.blocked.with_label_values(&["seckill"]).get(),
            2
        );
        let blocked = Counted::Blocked {
            policy: "seckill".into(),
        };
        assert!(list.metrics.tally.totals().contains(&(blocked, 2)));
    }
}
