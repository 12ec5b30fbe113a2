//! The live counters second by second, for the dashboard's charts: the buckets that
//! [`super`] flushes, read one point per second instead of summed.

use std::collections::BTreeMap;

use serde::Serialize;

use super::bucket_fields::{LOCAL, ORDERS, OUTCOME, REJECT, SHADOW, STOCK};
use crate::vocabulary::Outcome;

/// Where a purchase outcome goes in the chart: its own line, the errors (the service's
/// failures, not answers about the sale: the order could not be placed, the limiter
/// could not be asked, the purchase was shed or the orders breaker was open), nowhere
/// (a limiter refusal, charted per dimension from the limiter's own rejections), or
/// "other". The history's report per sale sorts its minutes' outcomes by it too.
pub(crate) fn line_of(outcome: &str) -> Line {
    match Outcome::ALL.iter().find(|o| o.label() == outcome) {
        Some(Outcome::SoldOut) => Line::SoldOut,
        Some(
            Outcome::OrderFailed
            | Outcome::LimiterUnavailable
            | Outcome::Overloaded
            | Outcome::OrdersUnavailable,
        ) => Line::Errors,
        Some(Outcome::RateLimited) => Line::None,
        _ => Line::Other,
    }
}

/// A chart line (see [`line_of`]).
pub(crate) enum Line {
    SoldOut,
    Errors,
    None,
    Other,
}

/// One point per second from `from` on, summed over every instance. Every array has
/// `windowSeconds` points; point `i` is second `from + i`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Series {
    /// The unix second of the first point.
    pub from: i64,
    /// Points in every array.
    pub window_seconds: u64,
    /// Purchases per second by outcome.
    pub purchases: PurchaseSeries,
    /// The sale limiter's refusals per second, by who answered them.
    pub refusals: RefusalSeries,
    /// Per item (by id), its live stock as sampled each second; `null` where no
    /// instance sampled it (not on sale then, or Redis was away).
    #[schema(value_type = BTreeMap<String, Vec<Option<i64>>>)]
    pub stock: BTreeMap<i64, Vec<Option<i64>>>,
}

/// Purchases per second by outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Purchases)]
pub struct PurchaseSeries {
    /// Orders created (answered 200).
    pub created: Vec<i64>,
    /// Refused `SOLD_OUT` (from the board or from Redis).
    pub sold_out: Vec<i64>,
    /// Refused by the sale's limiter, by the dimension (rule) that refused.
    pub rejected: BTreeMap<String, Vec<i64>>,
    /// What the sale's shadow rules would have refused, by rule (they refuse nothing:
    /// these purchases went on).
    pub shadow_refused: BTreeMap<String, Vec<i64>>,
    /// `ORDER_FAILED` and the limiter unreachable (503s).
    pub errors: Vec<i64>,
    /// Every other answer: already purchased, paused, not started, ended, unknown item,
    /// order pending, idempotent replays.
    pub other: Vec<i64>,
}

/// The sale limiter's refusals per second by who answered them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = Refusals)]
pub struct RefusalSeries {
    /// By the instance's denial cache, without a Redis call.
    pub local: Vec<i64>,
    /// By the limiter's script in Redis.
    pub redis: Vec<i64>,
}

impl Series {
    /// Reads the buckets of seconds `from`, `from + 1`, …; `dimensions` (the enforced
    /// rules in force) and `shadow` (the shadow rules) get a series even when nothing
    /// was refused by them. A field of another version's making is left out.
    pub(super) fn from_buckets(
        from: i64,
        buckets: &[BTreeMap<String, i64>],
        dimensions: &[String],
        shadow: &[String],
    ) -> Self {
        let n = buckets.len();
        let zeros = || vec![0; n];
        let mut series = Self {
            from,
            window_seconds: n as u64,
            purchases: PurchaseSeries {
                created: zeros(),
                sold_out: zeros(),
                rejected: dimensions.iter().map(|d| (d.clone(), zeros())).collect(),
                shadow_refused: shadow.iter().map(|d| (d.clone(), zeros())).collect(),
                errors: zeros(),
                other: zeros(),
            },
            refusals: RefusalSeries {
                local: zeros(),
                redis: zeros(),
            },
            stock: BTreeMap::new(),
        };
        let mut rejected = zeros();
        for (i, bucket) in buckets.iter().enumerate() {
            for (field, &value) in bucket {
                let purchases = &mut series.purchases;
                if field == ORDERS {
                    purchases.created[i] += value;
                } else if let Some(outcome) = field.strip_prefix(OUTCOME) {
                    match line_of(outcome) {
                        Line::SoldOut => purchases.sold_out[i] += value,
                        Line::Errors => purchases.errors[i] += value,
                        Line::None => {}
                        Line::Other => purchases.other[i] += value,
                    }
                } else if let Some(dimension) = field.strip_prefix(REJECT) {
                    purchases
                        .rejected
                        .entry(dimension.to_string())
                        .or_insert_with(zeros)[i] += value;
                    rejected[i] += value;
                } else if let Some(dimension) = field.strip_prefix(SHADOW) {
                    purchases
                        .shadow_refused
                        .entry(dimension.to_string())
                        .or_insert_with(zeros)[i] += value;
                } else if field.starts_with(LOCAL) {
                    series.refusals.local[i] += value;
                } else if let Some(item) = field.strip_prefix(STOCK) {
                    if let Ok(item) = item.parse() {
                        series.stock.entry(item).or_insert_with(|| vec![None; n])[i] = Some(value);
                    }
                }
            }
        }
        // Rejections minus local ones, never below 0: a flush that catches a local
        // refusal between its two counters puts its local count in the next second.
        series.refusals.redis = rejected
            .iter()
            .zip(&series.refusals.local)
            .map(|(all, local)| (all - local).max(0))
            .collect();
        series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(fields: &[(&str, i64)]) -> BTreeMap<String, i64> {
        fields.iter().map(|(f, v)| (f.to_string(), *v)).collect()
    }

    #[test]
    fn buckets_read_back_as_one_point_per_second() {
        let buckets = [
            bucket(&[("orders", 3), ("stock:7", 47), ("pass:user", 3)]),
            bucket(&[("shadow:tight", 2)]),
            bucket(&[
                ("orders", 1),
                ("outcome:sold_out", 4),
                ("outcome:order_failed", 1),
                ("outcome:limiter_unavailable", 2),
                ("outcome:already_purchased", 5),
                ("outcome:rate_limited", 6),
                ("reject:user", 2),
                ("reject:ip", 4),
                ("local:user", 1),
                ("local:ip", 2),
                ("stock:7", 46),
                ("stock:8", 0),
                ("from_a_later_version", 9),
            ]),
        ];
        let dimensions = ["api".to_string(), "user".to_string()];
        let series = Series::from_buckets(1_000, &buckets, &dimensions, &["tight".to_string()]);
        assert_eq!(
            series,
            Series {
                from: 1_000,
                window_seconds: 3,
                purchases: PurchaseSeries {
                    created: vec![3, 0, 1],
                    sold_out: vec![0, 0, 4],
                    rejected: [
                        ("api".to_string(), vec![0, 0, 0]),
                        ("ip".to_string(), vec![0, 0, 4]),
                        ("user".to_string(), vec![0, 0, 2]),
                    ]
                    .into(),
                    shadow_refused: [("tight".to_string(), vec![0, 2, 0])].into(),
                    errors: vec![0, 0, 3],
                    other: vec![0, 0, 5],
                },
                refusals: RefusalSeries {
                    local: vec![0, 0, 3],
                    redis: vec![0, 0, 3],
                },
                stock: [
                    (7, vec![Some(47), None, Some(46)]),
                    (8, vec![None, None, Some(0)])
                ]
                .into(),
            }
        );
    }

    #[test]
    fn a_local_refusal_caught_between_its_counters_never_makes_redis_negative() {
        let buckets = [bucket(&[("reject:ip", 1)]), bucket(&[("local:ip", 1)])];
        let series = Series::from_buckets(0, &buckets, &[], &[]);
        assert_eq!(series.refusals.redis, vec![1, 0]);
        assert_eq!(series.refusals.local, vec![0, 1]);
    }
}
