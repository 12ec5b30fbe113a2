//! The per-minute rows an operator reads back (`GET /admin/api/history`): one long table
//! over `history_items`, `history_decisions` and `history_rooms`, minute by minute or
//! summed per hour, read in pages so that a CSV of any allowed size streams in bounded
//! memory. The SQL is one function, `history_rows` (its migration says what each
//! column holds), shared by the count, the pages and the report per sale.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::configuration::HistorySettings;
use crate::limiter::policy::is_name;
use crate::sale::item::ItemId;
use crate::stats::record::WAIT_BUCKETS_SECS;

/// How long a range is when the query names neither end.
pub const DEFAULT_RANGE_HOURS: i64 = 24;

/// The rows' granularity.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HistoryStep {
    /// One row per minute, as folded.
    #[default]
    Minute,
    /// The minutes of each hour (UTC) summed.
    Hour,
}

impl HistoryStep {
    /// Postgres's `date_trunc` unit.
    fn unit(self) -> &'static str {
        match self {
            Self::Minute => "minute",
            Self::Hour => "hour",
        }
    }
}

/// What a history query asks for, its range checked against the settings' bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryQuery {
    /// The first instant, included.
    pub from: DateTime<Utc>,
    /// The last instant, excluded.
    pub to: DateTime<Utc>,
    /// Per minute or per hour.
    pub step: HistoryStep,
    /// Only this item's rows (of `history_items` and `history_rooms`); with no policy
    /// named, no decision rows.
    pub item: Option<ItemId>,
    /// Only this policy's rows (of `history_decisions`); with no item named, no item or
    /// room rows.
    pub policy: Option<String>,
}

/// Why a history query is refused: each names the query parameter at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HistoryRefused {
    /// Not a policy's name.
    #[error("policy must be a policy's name: 1-32 characters of a-z 0-9 _ -")]
    BadPolicy,
    /// `to` is not after `from`.
    #[error("to must be after from")]
    Backwards,
    /// The range is longer than `history.max_range_days`.
    #[error("from and to may be at most {max_days} days apart")]
    TooLong {
        /// The bound.
        max_days: u32,
    },
    /// The answer would hold more than `history.max_rows` rows.
    #[error(
        "the range holds {rows} rows, more than {max_rows}: narrow from and to, name an item \
         or a policy, or ask for step=hour"
    )]
    TooManyRows {
        /// The answer's rows.
        rows: i64,
        /// The bound.
        max_rows: usize,
    },
}

impl HistoryRefused {
    /// The query parameter at fault.
    pub fn field(&self) -> &'static str {
        match self {
            Self::BadPolicy => "policy",
            Self::Backwards | Self::TooLong { .. } | Self::TooManyRows { .. } => "to",
        }
    }
}

impl HistoryQuery {
    /// The query for `from`..`to` (defaults: `to` now, `from` a day before `to`),
    /// refused past `history.max_range_days`.
    pub fn new(
        from: Option<DateTime<Utc>>,
        to: Option<DateTime<Utc>>,
        step: HistoryStep,
        item: Option<ItemId>,
        policy: Option<String>,
        settings: &HistorySettings,
    ) -> Result<Self, HistoryRefused> {
        if policy.as_deref().is_some_and(|p| !is_name(p)) {
            return Err(HistoryRefused::BadPolicy);
        }
        let to = to.unwrap_or_else(Utc::now);
        let from = from.unwrap_or(to - Duration::hours(DEFAULT_RANGE_HOURS));
        if to <= from {
            return Err(HistoryRefused::Backwards);
        }
        let max_days = settings.max_range_days;
        if to - from > Duration::days(i64::from(max_days)) {
            return Err(HistoryRefused::TooLong { max_days });
        }
        Ok(Self {
            from,
            to,
            step,
            item,
            policy,
        })
    }

    /// Every row of one item, whenever folded: what its report reads.
    pub fn whole_item(item: ItemId) -> Self {
        Self {
            // The instants Postgres stores (`domain::is_storable`): the whole of it.
            from: DateTime::from_timestamp(0, 0).unwrap_or_default(),
            to: DateTime::from_timestamp(253_402_300_800, 0).unwrap_or_default(),
            step: HistoryStep::Minute,
            item: Some(item),
            policy: None,
        }
    }

    fn with_items(&self) -> bool {
        self.item.is_some() || self.policy.is_none()
    }

    fn with_decisions(&self) -> bool {
        self.policy.is_some() || self.item.is_none()
    }

    fn bounds() -> Vec<i64> {
        WAIT_BUCKETS_SECS.iter().map(|&b| b as i64).collect()
    }
}

/// One row: a count of one outcome in one minute (or hour).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct HistoryRow {
    /// The minute's (or hour's) start.
    pub at: DateTime<Utc>,
    /// `item` (a purchase outcome), `decision` (a limiter decision) or `room` (the
    /// waiting room's `joins`, `admissions`, `abandons`, and admissions by wait:
    /// `wait_le_<seconds>`, `wait_over_3600`).
    pub source: String,
    /// The item, on item and room rows.
    pub item: Option<i64>,
    /// The policy, on decision rows.
    pub policy: Option<String>,
    /// The rule, on decision rows (none for `fail_open` and `blocked`).
    pub rule: Option<String>,
    /// The outcome: a purchase's (`created`, `sold_out`, `rejected:<rule>`, …), a
    /// decision's (`pass`, `reject`, …) or the room's count.
    pub outcome: String,
    /// How many.
    pub count: i64,
}

/// Where a page of rows ends: the next page starts after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    at: DateTime<Utc>,
    source: String,
    item: i64,
    policy: String,
    rule: String,
    outcome: String,
}

impl HistoryRow {
    /// The cursor a page ending with this row continues from.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            at: self.at,
            source: self.source.clone(),
            item: self.item.unwrap_or(0),
            policy: self.policy.clone().unwrap_or_default(),
            rule: self.rule.clone().unwrap_or_default(),
            outcome: self.outcome.clone(),
        }
    }
}

/// How many rows `query` answers.
pub async fn count(pool: &PgPool, query: &HistoryQuery) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM history_rows($1, $2, $3, $4, $5, $6, $7, $8)"#,
        query.step.unit(),
        query.from,
        query.to,
        query.item.map(ItemId::get),
        query.policy.as_deref(),
        query.with_items(),
        query.with_decisions(),
        &HistoryQuery::bounds(),
    )
    .fetch_one(pool)
    .await?)
}

/// Refuses `query` when it answers more than `history.max_rows` rows.
pub async fn check_rows(
    pool: &PgPool,
    query: &HistoryQuery,
    settings: &HistorySettings,
) -> anyhow::Result<Result<(), HistoryRefused>> {
    let rows = count(pool, query).await?;
    let max_rows = settings.max_rows;
    Ok(if rows > max_rows as i64 {
        Err(HistoryRefused::TooManyRows { rows, max_rows })
    } else {
        Ok(())
    })
}

/// Up to `limit` rows of `query` after `after` (from the first when `None`), in order
/// of time, source, item, policy, rule and outcome.
pub async fn page(
    pool: &PgPool,
    query: &HistoryQuery,
    after: Option<&Cursor>,
    limit: i64,
) -> anyhow::Result<Vec<HistoryRow>> {
    let rows = sqlx::query!(
        r#"SELECT at AS "at!", source AS "source!", item AS "item!", policy AS "policy!",
                  rule AS "rule!", outcome AS "outcome!", count AS "count!"
           FROM history_rows($1, $2, $3, $4, $5, $6, $7, $8)
           WHERE $9::timestamptz IS NULL
              OR (at, source, item, policy, rule, outcome) > ($9, $10, $11, $12, $13, $14)
           ORDER BY at, source, item, policy, rule, outcome
           LIMIT $15"#,
        query.step.unit(),
        query.from,
        query.to,
        query.item.map(ItemId::get),
        query.policy.as_deref(),
        query.with_items(),
        query.with_decisions(),
        &HistoryQuery::bounds(),
        after.map(|c| c.at),
        after.map(|c| c.source.as_str()),
        after.map(|c| c.item),
        after.map(|c| c.policy.as_str()),
        after.map(|c| c.rule.as_str()),
        after.map(|c| c.outcome.as_str()),
        limit,
    )
    .fetch_all(pool)
    .await?;
    let some = |s: String| (!s.is_empty()).then_some(s);
    Ok(rows
        .into_iter()
        .map(|r| HistoryRow {
            at: r.at,
            source: r.source,
            item: (r.item != 0).then_some(r.item),
            policy: some(r.policy),
            rule: some(r.rule),
            outcome: r.outcome,
            count: r.count,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_range_is_a_day_to_its_end_by_default_and_bounded() {
        let settings = HistorySettings {
            max_range_days: 2,
            ..HistorySettings::default()
        };
        let to = at("2026-12-04T12:00:00Z");
        let query =
            HistoryQuery::new(None, Some(to), HistoryStep::Hour, None, None, &settings).unwrap();
        assert_eq!(query.from, at("2026-12-03T12:00:00Z"));
        let too_long = HistoryQuery::new(
            Some(at("2026-12-01T00:00:00Z")),
            Some(to),
            HistoryStep::Minute,
            None,
            None,
            &settings,
        );
        assert_eq!(too_long, Err(HistoryRefused::TooLong { max_days: 2 }));
        let backwards = HistoryQuery::new(
            Some(to),
            Some(to),
            HistoryStep::Minute,
            None,
            None,
            &settings,
        );
        assert_eq!(backwards.map_err(|e| e.field()), Err("to"));
    }
}
