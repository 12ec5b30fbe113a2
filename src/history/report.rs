//! A report per sale (`GET /admin/api/items/{id}/report`): what the stream's minutes
//! (`history_items`, `history_rooms`) and Postgres's orders say about one item, past or
//! live. The orders' figures are exact (Postgres); the stream's are what the instances
//! flushed (docs/history.md, "History and reports", says what that can miss).

use std::collections::BTreeMap;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use serde::Serialize;
use sqlx::PgPool;

use super::offenders::{self, AddressOffender, UserOffender};
use super::rows::{self, HistoryQuery};
use crate::configuration::HistorySettings;
use crate::sale::item::ItemId;
use crate::sale::records;
use crate::sale::Items;
use crate::stats::record::WAIT_BUCKETS_SECS;
use crate::stats::series::{line_of, Line};
use crate::vocabulary::OrderState;

/// A limiter refusal's outcome in `history_items`: `rejected:<rule>` (stats::record).
const REJECTED: &str = "rejected:";

/// One sale, after the fact.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SaleReport {
    /// The item as it stands.
    pub item: ReportItem,
    /// Its waiting room, summed over the sale (0 when it had none).
    pub queue: QueueFigures,
    /// Its orders in Postgres, exact.
    pub orders: OrderFigures,
    /// Purchase attempts the stream counted (every answer, refusals included).
    pub attempts: i64,
    /// Purchases refused by the limiter, by the dimension (rule) that refused.
    pub refused: BTreeMap<String, i64>,
    /// Purchases that failed for the service's reasons (`ORDER_FAILED`, the limiter
    /// unreachable, shed, the orders breaker open), as the dashboard's charts count them.
    pub errors: i64,
    /// Every answer the stream counted, by outcome word (`created`, `sold_out`,
    /// `rejected:<rule>`, …).
    pub outcomes: BTreeMap<String, i64>,
    /// The minute with the most orders created (Postgres), the first of equals.
    pub peak: Option<Peak>,
    /// When every unit had been taken once.
    pub sold_out: Option<SoldOut>,
    /// How long admitted shoppers waited in the room.
    pub waits: Waits,
    /// The sale's top offenders.
    pub offenders: ReportOffenders,
    /// Minute by minute, from the first minute anything happened to the last.
    pub minutes: Vec<ReportMinute>,
}

/// The item a report is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportItem {
    /// Its id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Units put on sale.
    pub total_stock: i64,
    /// Units left now (Redis's count; Postgres's when Redis has none).
    pub units_left: i64,
    /// When purchases opened.
    pub starts_at: DateTime<Utc>,
    /// When purchases closed (or will).
    pub ends_at: DateTime<Utc>,
}

/// The waiting room's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueFigures {
    /// Shoppers who joined the queue.
    pub joined: i64,
    /// Shoppers admitted (offered a pass).
    pub admitted: i64,
    /// Shoppers who left, or whose pass expired unused.
    pub abandoned: i64,
}

/// The item's orders by state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OrderFigures {
    /// Orders created, whatever became of them.
    pub bought: i64,
    /// Still waiting for payment.
    pub pending_payment: i64,
    /// Paid.
    pub paid: i64,
    /// Cancelled by their shoppers.
    pub cancelled: i64,
    /// Not paid in time.
    pub expired: i64,
}

/// The peak purchase rate: orders created in one minute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Peak {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Orders created in it.
    pub orders: i64,
}

/// When the item sold out: its `total_stock`-th order (by creation, whatever its state
/// since), the first moment every unit had been taken. Units that came back later
/// (cancelled, expired) do not move it; `ReportItem::units_left` says whether any is
/// left now.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SoldOut {
    /// The last unit's order's creation.
    pub at: DateTime<Utc>,
    /// Seconds from the sale's start.
    pub seconds_from_start: f64,
}

/// Admissions by wait, and its median and 95th percentile, as precise as the buckets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Waits {
    /// Admissions with a known wait.
    pub admitted: i64,
    /// The bucket the median falls in; none without admissions.
    pub median: Option<WaitBucket>,
    /// The bucket the 95th percentile falls in.
    pub p95: Option<WaitBucket>,
    /// Every bucket, in order.
    pub buckets: Vec<WaitBucket>,
}

/// Waits over `over_secs` and up to `up_to_secs` (none: over the last bound, an hour).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitBucket {
    /// The bucket's lower bound, excluded (0 for the first).
    pub over_secs: u64,
    /// Its upper bound, included.
    pub up_to_secs: Option<u64>,
    /// Admissions in it.
    pub count: i64,
}

/// The sale's top offenders: its minutes' merged heavy hitters, with their labels
/// (`history::offenders`), shaped as `GET /admin/api/offenders` answers them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ReportOffenders {
    /// Refused users, most refused first.
    pub users: Vec<UserOffender>,
    /// Refused addresses, most refused first.
    pub addresses: Vec<AddressOffender>,
}

/// One minute of the sale.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportMinute {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Purchase attempts (every answer).
    pub attempts: i64,
    /// Shoppers the room admitted.
    pub admitted: i64,
    /// Limiter refusals by dimension (every dimension of the sale, 0 where none).
    pub refused: BTreeMap<String, i64>,
    /// Orders created (Postgres).
    pub sold: i64,
    /// The service's failures (see `SaleReport::errors`).
    pub errors: i64,
}

impl SaleReport {
    /// The dimensions that refused anything, in order: the minutes' `refused` keys.
    pub fn dimensions(&self) -> impl Iterator<Item = &String> {
        self.refused.keys()
    }
}

/// The report of `item`, or `None` when there is no such item.
pub async fn sale_report(
    pool: &PgPool,
    items: &Items,
    item: ItemId,
    settings: &HistorySettings,
) -> anyhow::Result<Option<SaleReport>> {
    let Some((figures, units_left)) = items.with_figures(true, Some(item)).await?.pop() else {
        return Ok(None);
    };
    let stored = figures.item;
    let rows = rows::page(pool, &HistoryQuery::whole_item(item), None, i64::MAX).await?;
    let sold_per_minute = orders_per_minute(pool, item).await?;

    let mut report = SaleReport {
        item: ReportItem {
            id: item.get(),
            name: stored.name.clone(),
            total_stock: i64::from(stored.total_stock),
            units_left,
            starts_at: stored.starts_at,
            ends_at: stored.ends_at,
        },
        queue: QueueFigures::default(),
        orders: order_figures(pool, item).await?,
        attempts: 0,
        refused: BTreeMap::new(),
        errors: 0,
        outcomes: BTreeMap::new(),
        peak: sold_per_minute
            .iter()
            // The first of equals: max_by_key keeps the last.
            .rev()
            .max_by_key(|(_, orders)| *orders)
            .map(|(&minute, &orders)| Peak { minute, orders }),
        sold_out: sold_out(pool, item, stored.total_stock, stored.starts_at).await?,
        waits: waits(pool, item).await?,
        offenders: offenders_of(pool, item, stored.starts_at, stored.ends_at).await?,
        minutes: Vec::new(),
    };

    let mut minutes: BTreeMap<DateTime<Utc>, ReportMinute> = BTreeMap::new();
    for row in &rows {
        let minute = minutes.entry(row.at).or_default();
        match row.source.as_str() {
            "item" => {
                *report.outcomes.entry(row.outcome.clone()).or_default() += row.count;
                report.attempts += row.count;
                minute.attempts += row.count;
                if let Some(rule) = row.outcome.strip_prefix(REJECTED) {
                    *report.refused.entry(rule.to_string()).or_default() += row.count;
                    *minute.refused.entry(rule.to_string()).or_default() += row.count;
                } else if let Line::Errors = line_of(&row.outcome) {
                    report.errors += row.count;
                    minute.errors += row.count;
                }
            }
            "room" => match row.outcome.as_str() {
                "joins" => report.queue.joined += row.count,
                "admissions" => {
                    report.queue.admitted += row.count;
                    minute.admitted += row.count;
                }
                "abandons" => report.queue.abandoned += row.count,
                _ => {}
            },
            _ => {}
        }
    }
    for (&at, &sold) in &sold_per_minute {
        minutes.entry(at).or_default().sold = sold;
    }
    report.minutes = dense(
        minutes,
        report.dimensions().cloned().collect(),
        settings.max_rows,
    );
    Ok(Some(report))
}

/// Every minute from the first to the last of `sparse` (at most `max` of them), each
/// with every dimension.
fn dense(
    sparse: BTreeMap<DateTime<Utc>, ReportMinute>,
    dimensions: Vec<String>,
    max: usize,
) -> Vec<ReportMinute> {
    let (Some(&first), Some(&last)) = (sparse.keys().next(), sparse.keys().next_back()) else {
        return Vec::new();
    };
    let zeros: BTreeMap<String, i64> = dimensions.into_iter().map(|d| (d, 0)).collect();
    let mut out = Vec::new();
    let mut at = first;
    while at <= last && out.len() < max {
        let mut minute = sparse.get(&at).cloned().unwrap_or_default();
        minute.minute = at;
        let mut refused = zeros.clone();
        refused.extend(minute.refused);
        minute.refused = refused;
        out.push(minute);
        at += chrono::Duration::minutes(1);
    }
    out
}

async fn order_figures(pool: &PgPool, item: ItemId) -> anyhow::Result<OrderFigures> {
    let mut figures = OrderFigures::default();
    for (state, count) in records::order_state_counts(pool, item).await? {
        figures.bought += count;
        *match state {
            OrderState::PendingPayment => &mut figures.pending_payment,
            OrderState::Paid => &mut figures.paid,
            OrderState::Cancelled => &mut figures.cancelled,
            OrderState::Expired => &mut figures.expired,
        } += count;
    }
    Ok(figures)
}

/// Orders created per minute, whatever their state since.
async fn orders_per_minute(
    pool: &PgPool,
    item: ItemId,
) -> anyhow::Result<BTreeMap<DateTime<Utc>, i64>> {
    Ok(sqlx::query!(
        r#"SELECT date_trunc('minute', created_at, 'UTC') AS "minute!", count(*) AS "orders!"
           FROM orders WHERE item_id = $1 GROUP BY 1"#,
        item.get()
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.minute, r.orders))
    .collect())
}

async fn sold_out(
    pool: &PgPool,
    item: ItemId,
    total_stock: i32,
    starts_at: DateTime<Utc>,
) -> anyhow::Result<Option<SoldOut>> {
    let last_unit = sqlx::query_scalar!(
        "SELECT created_at FROM orders WHERE item_id = $1 ORDER BY created_at, id
         OFFSET $2 LIMIT 1",
        item.get(),
        i64::from(total_stock) - 1,
    )
    .fetch_optional(pool)
    .await?;
    Ok(last_unit.map(|at| SoldOut {
        at,
        seconds_from_start: (at - starts_at).num_milliseconds() as f64 / 1_000.0,
    }))
}

/// Admissions by wait over every minute of the item's room.
async fn waits(pool: &PgPool, item: ItemId) -> anyhow::Result<Waits> {
    let minutes = sqlx::query_scalar!(
        "SELECT waits FROM history_rooms WHERE item_id = $1",
        item.get()
    )
    .fetch_all(pool)
    .await?;
    let mut counts = vec![0_i64; WAIT_BUCKETS_SECS.len() + 1];
    for waits in minutes {
        // A record of a version with more buckets adds its extra ones to the last.
        for (i, n) in waits.into_iter().enumerate() {
            counts[i.min(WAIT_BUCKETS_SECS.len())] += n;
        }
    }
    Ok(Waits::from_counts(&counts))
}

impl Waits {
    /// The figures of admissions counted per bucket (`WAIT_BUCKETS_SECS`, then one over
    /// the last).
    pub fn from_counts(counts: &[i64]) -> Self {
        let buckets: Vec<WaitBucket> = counts
            .iter()
            .enumerate()
            .map(|(i, &count)| WaitBucket {
                over_secs: if i == 0 {
                    0
                } else {
                    WAIT_BUCKETS_SECS[(i - 1).min(WAIT_BUCKETS_SECS.len() - 1)]
                },
                up_to_secs: WAIT_BUCKETS_SECS.get(i).copied(),
                count,
            })
            .collect();
        let admitted: i64 = counts.iter().sum();
        // Nearest rank: the bucket holding the ⌈q·n⌉-th wait.
        let quantile = |percent: i64| {
            let rank = ((admitted * percent + 99) / 100).max(1);
            let mut seen = 0;
            buckets
                .iter()
                .find(|b| {
                    seen += b.count;
                    seen >= rank
                })
                .cloned()
        };
        Self {
            admitted,
            median: (admitted > 0).then(|| quantile(50)).flatten(),
            p95: (admitted > 0).then(|| quantile(95)).flatten(),
            buckets,
        }
    }
}

/// The sale's top offenders: those of the item over the minutes from its start to its
/// end (or now, for a sale still on), whole minutes.
async fn offenders_of(
    pool: &PgPool,
    item: ItemId,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
) -> anyhow::Result<ReportOffenders> {
    let minute = TimeDelta::minutes(1);
    let from = starts_at.duration_trunc(minute).unwrap_or(starts_at);
    let to = ends_at
        .min(Utc::now())
        .duration_trunc(minute)
        .unwrap_or(ends_at)
        + minute;
    let top = offenders::top_between(pool, from, to, Some(item.get())).await?;
    Ok(ReportOffenders {
        users: UserOffender::all(top.users),
        addresses: AddressOffender::all(top.addresses),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_and_95th_percentile_are_the_buckets_their_ranks_fall_in() {
        // 20 admissions: 9 within a second, 9 over 2 s and up to 5 s, 2 over an hour.
        let mut counts = vec![0; WAIT_BUCKETS_SECS.len() + 1];
        counts[0] = 9;
        counts[2] = 9;
        counts[WAIT_BUCKETS_SECS.len()] = 2;
        let waits = Waits::from_counts(&counts);
        assert_eq!(waits.admitted, 20);
        let bucket = |over_secs, up_to_secs, count| WaitBucket {
            over_secs,
            up_to_secs,
            count,
        };
        // The 10th wait is the first over 2 s; the 19th, over an hour.
        assert_eq!(waits.median, Some(bucket(2, Some(5), 9)));
        assert_eq!(waits.p95, Some(bucket(3_600, None, 2)));
        assert_eq!(Waits::from_counts(&[0; 13]).median, None);
    }
}
