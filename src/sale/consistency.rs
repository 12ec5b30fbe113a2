//! The per-item gauges read off the request path: the consistency export, and the
//! pruning that keeps every per-item series bounded.
//!
//! Per item on sale, the live orders in Postgres and the Redis success counter are two
//! numbers that must agree; an alert watches them. Orders by state are summed over the
//! items on sale. A series is dropped when its item's
//! sale ends, so the label set grows with the items on sale, not with every item ever.

use chrono::Utc;
use prometheus::IntGaugeVec;

use super::catalog::Catalog;
use super::item::ItemId;
use super::parts::SaleParts;
use super::records;
use crate::vocabulary::OrderState;

/// The per-item gauges' export and pruning (see the module docs).
pub struct ConsistencyExport {
    parts: SaleParts,
}

impl ConsistencyExport {
    /// Over the shared parts.
    pub fn new(parts: &SaleParts) -> Self {
        Self {
            parts: parts.clone(),
        }
    }

    /// One export of every item on sale.
    pub async fn run(&self) -> anyhow::Result<()> {
        let SaleParts {
            pool,
            redis,
            catalog,
            metrics,
            ..
        } = &self.parts;
        let items = catalog.unended(Utc::now());
        let ids: Vec<_> = items.iter().map(|i| i.id).collect();
        retain_item_series(catalog, &metrics.consistency_postgres_orders, &ids);
        retain_item_series(catalog, &metrics.consistency_redis_success, &ids);
        let mut by_state = std::collections::HashMap::new();
        for id in ids {
            let states = records::order_state_counts(pool, id).await?;
            for (state, count) in &states {
                *by_state.entry(*state).or_insert(0) += count;
            }
            // Live orders: a released one no longer counts, in either store.
            let orders: i64 = states
                .iter()
                .filter(|(state, _)| state.is_live())
                .map(|(_, count)| count)
                .sum();
            let success = redis.success_count(id).await?;
            let label = id.to_string();
            metrics
                .consistency_postgres_orders
                .with_label_values(&[&label])
                .set(orders);
            metrics
                .consistency_redis_success
                .with_label_values(&[&label])
                .set(success);
        }
        for state in OrderState::ALL {
            let count = by_state.get(state).copied().unwrap_or(0);
            metrics
                .orders_by_state
                .with_label_values(&[state.as_str()])
                .set(count);
        }
        Ok(())
    }
}

/// Drops the series of items no longer on sale from `gauge`.
pub(super) fn retain_item_series(catalog: &Catalog, gauge: &IntGaugeVec, on_sale: &[ItemId]) {
    for item in catalog.ended_ids(Utc::now()) {
        if !on_sale.contains(&item) {
            let _ = gauge.remove_label_values(&[&item.to_string()]);
        }
    }
}
