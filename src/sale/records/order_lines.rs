//! Orders as operators work with them: each with its item's name, its amount and when
//! it was paid; a page at a time for the dashboard, or every match in keyset order for
//! the CSV export (bounded memory: one batch at a time, no connection held between
//! batches).

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::{Order, OrderFilter, OrderRow};
use crate::domain::UserId;
use crate::sale::item::ItemId;
use crate::vocabulary::OrderState;

/// An order with what an operator needs beside it.
#[derive(Debug, Clone)]
pub struct OrderLine {
    /// The order as stored.
    pub order: Order,
    /// Its item's name now.
    pub item_name: String,
    /// The price it was bought at (one unit); the item's price for orders older than
    /// that record.
    pub amount_cents: i64,
    /// When it was paid; `None` unless paid.
    pub paid_at: Option<DateTime<Utc>>,
}

struct LineRow {
    id: Uuid,
    user_id: i64,
    item_id: i64,
    created_at: DateTime<Utc>,
    state: String,
    pay_by: Option<DateTime<Utc>>,
    state_changed_at: Option<DateTime<Utc>>,
    item_name: String,
    amount_cents: i64,
}

impl TryFrom<LineRow> for OrderLine {
    type Error = anyhow::Error;

    fn try_from(row: LineRow) -> anyhow::Result<Self> {
        let order = Order::try_from(OrderRow {
            id: row.id,
            user_id: row.user_id,
            item_id: row.item_id,
            created_at: row.created_at,
            state: row.state,
            pay_by: row.pay_by,
        })?;
        let paid_at = (order.state == OrderState::Paid)
            .then_some(row.state_changed_at)
            .flatten();
        Ok(Self {
            order,
            item_name: row.item_name,
            amount_cents: row.amount_cents,
            paid_at,
        })
    }
}

/// A page of orders, newest first, with the filter's conditions; and how many match in
/// all.
pub async fn search_order_lines(
    pool: &PgPool,
    filter: &OrderFilter,
) -> anyhow::Result<(Vec<OrderLine>, i64)> {
    let lines = sqlx::query_as!(
        LineRow,
        r#"SELECT o.id, o.user_id, o.item_id, o.created_at, o.state, o.pay_by, o.state_changed_at,
               i.name AS item_name, COALESCE(o.price_cents, i.price_cents) AS "amount_cents!"
           FROM orders o JOIN items i ON i.id = o.item_id
           WHERE ($1::bigint IS NULL OR o.item_id = $1)
             AND ($2::bigint IS NULL OR o.user_id = $2)
             AND ($3::timestamptz IS NULL OR o.created_at >= $3)
             AND ($4::timestamptz IS NULL OR o.created_at < $4)
             AND ($7::text IS NULL OR o.state = $7)
             AND ($8::uuid IS NULL OR o.id = $8)
           ORDER BY o.created_at DESC, o.id DESC
           LIMIT $5 OFFSET $6"#,
        filter.item.map(ItemId::get),
        filter.user.map(UserId::get),
        filter.from,
        filter.to,
        filter.per_page,
        (filter.page - 1) * filter.per_page,
        filter.state.map(OrderState::as_str),
        filter.order,
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(OrderLine::try_from)
    .collect::<anyhow::Result<Vec<_>>>()?;
    let total = sqlx::query_scalar!(
        r#"SELECT count(*) AS "count!" FROM orders
           WHERE ($1::bigint IS NULL OR item_id = $1)
             AND ($2::bigint IS NULL OR user_id = $2)
             AND ($3::timestamptz IS NULL OR created_at >= $3)
             AND ($4::timestamptz IS NULL OR created_at < $4)
             AND ($5::text IS NULL OR state = $5)
             AND ($6::uuid IS NULL OR id = $6)"#,
        filter.item.map(ItemId::get),
        filter.user.map(UserId::get),
        filter.from,
        filter.to,
        filter.state.map(OrderState::as_str),
        filter.order,
    )
    .fetch_one(pool)
    .await?;
    Ok((lines, total))
}

/// Up to `limit` orders matching `filter` (its page ignored), newest first, strictly
/// after `cursor` (the last one of the previous batch: its creation time and id).
pub async fn order_lines_after(
    pool: &PgPool,
    filter: &OrderFilter,
    cursor: Option<(DateTime<Utc>, Uuid)>,
    limit: i64,
) -> anyhow::Result<Vec<OrderLine>> {
    sqlx::query_as!(
        LineRow,
        r#"SELECT o.id, o.user_id, o.item_id, o.created_at, o.state, o.pay_by, o.state_changed_at,
               i.name AS item_name, COALESCE(o.price_cents, i.price_cents) AS "amount_cents!"
           FROM orders o JOIN items i ON i.id = o.item_id
           WHERE ($1::bigint IS NULL OR o.item_id = $1)
             AND ($2::bigint IS NULL OR o.user_id = $2)
             AND ($3::timestamptz IS NULL OR o.created_at >= $3)
             AND ($4::timestamptz IS NULL OR o.created_at < $4)
             AND ($5::text IS NULL OR o.state = $5)
             AND ($6::uuid IS NULL OR o.id = $6)
             AND ($7::timestamptz IS NULL OR (o.created_at, o.id) < ($7, $8::uuid))
           ORDER BY o.created_at DESC, o.id DESC
           LIMIT $9"#,
        filter.item.map(ItemId::get),
        filter.user.map(UserId::get),
        filter.from,
        filter.to,
        filter.state.map(OrderState::as_str),
        filter.order,
        cursor.map(|(at, _)| at),
        cursor.map(|(_, id)| id),
        limit,
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(OrderLine::try_from)
    .collect()
}
