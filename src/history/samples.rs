//! The refusal samples read back (`refusal_samples`, one limiter refusal in
//! `history.sample_every`, whole). They name users and addresses, personal data: the
//! admin API is their only reader (`GET /admin/api/history/samples`), and retention
//! deletes them after `history.sample_retention_days` (docs/history.md).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

use super::rows::HistoryQuery;

/// One sampled refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SampledRefusal {
    /// When the limiter refused it.
    pub at: DateTime<Utc>,
    /// The policy that refused.
    pub policy: String,
    /// The rule (dimension) that refused.
    pub rule: String,
    /// The shopper, when the route knew one.
    pub user: Option<i64>,
    /// The address as the limiter keyed it (an IPv6 address by its /64).
    pub ip: Option<String>,
    /// The item, on the sale's routes.
    pub item: Option<i64>,
}

/// The samples of `query`'s range (and its item, its policy, when named), oldest first,
/// at most `limit`.
pub async fn between(
    pool: &PgPool,
    query: &HistoryQuery,
    limit: i64,
) -> anyhow::Result<Vec<SampledRefusal>> {
    let rows = sqlx::query!(
        r#"SELECT at, policy, rule, user_id, ip, item_id FROM refusal_samples
           WHERE at >= $1 AND at < $2
             AND ($3::BIGINT IS NULL OR item_id = $3)
             AND ($4::TEXT IS NULL OR policy = $4)
           ORDER BY at LIMIT $5"#,
        query.from,
        query.to,
        query.item.map(|item| item.get()),
        query.policy.as_deref(),
        limit,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| SampledRefusal {
            at: row.at,
            policy: row.policy,
            rule: row.rule,
            user: row.user_id,
            ip: row.ip,
            item: row.item_id,
        })
        .collect())
}
