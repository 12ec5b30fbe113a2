//! The top offenders of a window: the merge of every instance's per-minute heavy hitters
//! (`history_hitters`, written by the fold from the stream's `MinuteSketch`es), labelled
//! by [`super::classify`].
//!
//! A window of `W` seconds covers the `W / 60` **complete** minutes before the current
//! one on Postgres's clock: `[m − W, m)`, `m` the start of the current minute. Window 60
//! is the last complete minute; 3 600 the last 60. A minute's sketches arrive with each
//! instance's first record after it ended (about a second later, then the fold's
//! period), so in the first seconds of a minute the previous one may still lack an
//! instance's share. The merge of one value over instances and minutes sums `count`,
//! `error` and `dimensions`, and keeps the largest `others`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde::Serialize;
use sqlx::types::Json;
use sqlx::PgPool;

use super::classify::{self, Label, Merged};

/// The most offenders of each kind an answer names.
pub const TOP: i64 = 20;
/// The most values of a kind the gauge classifies over the last hour.
const CLASSIFIED_MAX: i64 = 10_000;

/// A window the API offers: the last complete minute, or the last 60.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// `window=60`.
    Minute,
    /// `window=3600`.
    Hour,
}

impl Window {
    /// `60` or `3600`; anything else is no window.
    pub fn from_secs(secs: &str) -> Option<Self> {
        match secs {
            "60" => Some(Self::Minute),
            "3600" => Some(Self::Hour),
            _ => None,
        }
    }

    /// Its length.
    pub fn secs(self) -> i64 {
        match self {
            Self::Minute => 60,
            Self::Hour => 3_600,
        }
    }

    /// The minutes it covers, ending at the start of the minute holding `now`.
    pub fn span(self, now: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let to = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
        (to - TimeDelta::seconds(self.secs()), to)
    }
}

/// One offender of an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Offender {
    /// The user id, or the address as the limiter keys it.
    pub value: String,
    /// Refusals counted over the window (an upper bound: over by at most `error`).
    pub refusals: i64,
    /// How much of `refusals` may be other values'.
    pub error: i64,
    /// Refusals by dimension (rule).
    pub dimensions: BTreeMap<String, i64>,
    /// Distinct others seen with it in one instance's minute (users behind an address,
    /// addresses of a user), at most.
    pub others: i64,
    /// The window's minutes it was refused in.
    pub minutes: i64,
    /// Its class, if a rule names one.
    pub label: Option<Label>,
}

/// A refused user as the admin API answers it: its id, then its counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct UserOffender {
    /// The user's id.
    pub id: i64,
    /// Its refusals, dimensions and label.
    #[serde(flatten)]
    pub counts: Offender,
}

impl UserOffender {
    /// The users of an answer, by id (a value that is no user id is left out: none is).
    pub fn all(users: Vec<Offender>) -> Vec<Self> {
        users
            .into_iter()
            .filter_map(|counts| {
                let id = counts.value.parse().ok()?;
                Some(Self { id, counts })
            })
            .collect()
    }
}

/// A refused address as the admin API answers it: the address, then its counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AddressOffender {
    /// The address as the limiter keys it (an IPv6 address by its /64).
    pub ip: String,
    /// Its refusals, dimensions and label.
    #[serde(flatten)]
    pub counts: Offender,
}

impl AddressOffender {
    /// The addresses of an answer.
    pub fn all(addresses: Vec<Offender>) -> Vec<Self> {
        addresses
            .into_iter()
            .map(|counts| Self {
                ip: counts.value.clone(),
                counts,
            })
            .collect()
    }
}

/// The top offenders of a window.
#[derive(Debug, Clone, Serialize)]
pub struct Offenders {
    /// The first minute covered.
    pub from: DateTime<Utc>,
    /// The end of the last minute covered (exclusive).
    pub to: DateTime<Utc>,
    /// Refused users, the most refused first.
    pub users: Vec<Offender>,
    /// Refused addresses, the most refused first.
    pub addresses: Vec<Offender>,
}

/// The top [`TOP`] users and addresses of `window` before now, of `item` or of all.
pub async fn top(pool: &PgPool, window: Window, item: Option<i64>) -> anyhow::Result<Offenders> {
    let now = sqlx::query_scalar!(r#"SELECT now() AS "now!""#)
        .fetch_one(pool)
        .await?;
    let (from, to) = window.span(now);
    top_between(pool, from, to, item).await
}

/// The top [`TOP`] users and addresses of the minutes in `[from, to)`, of `item` or of
/// all: for a sale's report, its own minutes.
pub async fn top_between(
    pool: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    item: Option<i64>,
) -> anyhow::Result<Offenders> {
    let users = merged(pool, "user", from, to, item, TOP).await?;
    let addresses = merged(pool, "ip", from, to, item, TOP).await?;
    let join_ips = by_value(merged(pool, "join_ip", from, to, item, CLASSIFIED_MAX).await?);
    let join_blocks = merged(pool, "join_block", from, to, item, CLASSIFIED_MAX).await?;
    let users = users
        .into_iter()
        .map(|user| {
            let block = block_of(&user.value, &join_blocks);
            let label = classify::user_label(&user, block);
            offender(user, label)
        })
        .collect();
    let addresses = addresses
        .into_iter()
        .map(|address| {
            let label = classify::address_label(&address, join_ips.get(&address.value));
            offender(address, label)
        })
        .collect();
    Ok(Offenders {
        from,
        to,
        users,
        addresses,
    })
}

/// How many offenders of the last hour each label names: every refused user and address
/// (not only the top), the addresses and blocks of ids farming the queue.
pub async fn label_counts(pool: &PgPool) -> anyhow::Result<BTreeMap<Label, i64>> {
    let now = sqlx::query_scalar!(r#"SELECT now() AS "now!""#)
        .fetch_one(pool)
        .await?;
    let (from, to) = Window::Hour.span(now);
    let users = merged(pool, "user", from, to, None, CLASSIFIED_MAX).await?;
    let addresses = merged(pool, "ip", from, to, None, CLASSIFIED_MAX).await?;
    let join_ips = by_value(merged(pool, "join_ip", from, to, None, CLASSIFIED_MAX).await?);
    let join_blocks = merged(pool, "join_block", from, to, None, CLASSIFIED_MAX).await?;
    let mut counts: BTreeMap<Label, i64> = Label::ALL.iter().map(|l| (*l, 0)).collect();
    let mut count = |label: Option<Label>| {
        if let Some(label) = label {
            *counts.entry(label).or_default() += 1;
        }
    };
    for user in &users {
        count(classify::user_label(
            user,
            block_of(&user.value, &join_blocks),
        ));
    }
    for address in &addresses {
        count(classify::address_label(
            address,
            join_ips.get(&address.value),
        ));
    }
    // Farmers no refusal named: every farming block, and the farming addresses not
    // already classified among the refused.
    let refused: std::collections::HashSet<&str> =
        addresses.iter().map(|a| a.value.as_str()).collect();
    for (value, joins) in &join_ips {
        if !refused.contains(value.as_str()) && classify::farming_address(joins) {
            count(Some(Label::QueueFarmer));
        }
    }
    for block in &join_blocks {
        if classify::farming_block(block) {
            count(Some(Label::QueueFarmer));
        }
    }
    Ok(counts)
}

/// Sets `offenders{label}` from [`label_counts`] every `period`.
pub async fn watch(pool: PgPool, gauge: prometheus::IntGaugeVec, period: Duration) {
    for label in Label::ALL {
        gauge.with_label_values(&[label.as_str()]).set(0);
    }
    crate::background::every("offender classification", period, move || {
        let (pool, gauge) = (pool.clone(), gauge.clone());
        async move {
            for (label, count) in label_counts(&pool).await? {
                gauge.with_label_values(&[label.as_str()]).set(count);
            }
            Ok(())
        }
    })
    .await
}

fn offender(merged: Merged, label: Option<Label>) -> Offender {
    Offender {
        value: merged.value,
        refusals: merged.count,
        error: merged.error,
        dimensions: merged.dimensions,
        others: merged.others,
        minutes: merged.minutes,
        label,
    }
}

fn by_value(merged: Vec<Merged>) -> HashMap<String, Merged> {
    merged.into_iter().map(|m| (m.value.clone(), m)).collect()
}

/// The farming block a user id falls in, if any.
fn block_of<'a>(user: &str, blocks: &'a [Merged]) -> Option<&'a Merged> {
    let user = user.parse::<i64>().ok()?;
    blocks
        .iter()
        .filter(|block| classify::in_block(user, &block.value))
        .max_by_key(|block| block.others)
}

/// The `limit` values of `kind` counted most over `[from, to)`, merged (module docs).
async fn merged(
    pool: &PgPool,
    kind: &str,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    item: Option<i64>,
    limit: i64,
) -> anyhow::Result<Vec<Merged>> {
    let rows = sqlx::query!(
        r#"WITH chosen AS (
               SELECT value, dimensions, count, error, others, minute FROM history_hitters
               WHERE kind = $1 AND minute >= $2 AND minute < $3
                 AND ($4::bigint IS NULL OR item_id = $4)),
           top AS (
               SELECT value, sum(count)::bigint AS count, sum(error)::bigint AS error,
                      max(others)::bigint AS others, count(DISTINCT minute)::bigint AS minutes
               FROM chosen GROUP BY value ORDER BY count DESC, value LIMIT $5)
           SELECT top.value AS "value!", top.count AS "count!", top.error AS "error!",
                  top.others AS "others!", top.minutes AS "minutes!",
                  (SELECT COALESCE(jsonb_object_agg(d.key, d.total), '{}'::jsonb) FROM (
                       SELECT e.key, sum(e.value::bigint)::bigint AS total
                       FROM chosen c, jsonb_each_text(c.dimensions) e
                       WHERE c.value = top.value GROUP BY e.key) d)
                    AS "dimensions!: Json<BTreeMap<String, i64>>"
           FROM top ORDER BY top.count DESC, top.value"#,
        kind,
        from,
        to,
        item,
        limit
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| Merged {
            value: row.value,
            count: row.count,
            error: row.error,
            dimensions: row.dimensions.0,
            others: row.others,
            minutes: row.minutes,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_the_complete_minutes_before_the_current_one() {
        let now = DateTime::parse_from_rfc3339("2026-12-04T10:07:42Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        assert_eq!(
            Window::Minute.span(now),
            (at("2026-12-04T10:06:00Z"), at("2026-12-04T10:07:00Z"))
        );
        assert_eq!(
            Window::Hour.span(now),
            (at("2026-12-04T09:07:00Z"), at("2026-12-04T10:07:00Z"))
        );
        assert_eq!(Window::from_secs("600"), None);
    }
}
