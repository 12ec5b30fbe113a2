//! The order life cycle in Postgres, the truth of it: `pending_payment` → `paid`,
//! `cancelled` or `expired`, nothing else. Each transition is one conditional UPDATE on
//! the state (and, for a payment, on the deadline not having passed), so of two
//! transitions racing for one order exactly one matches a row. A cancellation or an
//! expiry gives the unit back to `items.remaining_stock` in the same transaction; Redis
//! gets it back afterwards ([`crate::sale::stock`]'s give-back), and [`mark_returned`]
//! records that it did.

use std::collections::BTreeMap;

use sqlx::PgPool;
use uuid::Uuid;

use super::{Order, OrderRow};
use crate::domain::UserId;
use crate::sale::item::ItemId;
use crate::vocabulary::OrderState;

/// The transitions a shopper asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// `pending_payment` to `paid`.
    Pay,
    /// `pending_payment` to `cancelled`, the unit given back.
    Cancel,
}

/// A released unit Redis has still to get back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiveBack {
    /// The released order.
    pub order: Uuid,
    /// Its buyer, whom Redis may free to buy again.
    pub user: UserId,
    /// The item whose unit comes back.
    pub item: ItemId,
}

impl GiveBack {
    pub(in crate::sale) fn parse(order: Uuid, user: i64, item: i64) -> anyhow::Result<Self> {
        Ok(Self {
            order,
            user: UserId::try_from(user)?,
            item: ItemId::try_from(item)?,
        })
    }
}

/// What a shopper's transition found.
#[derive(Debug)]
pub enum Moved {
    /// Done: the order as it is now (and, for a cancellation, the unit to give back).
    Done(Order),
    /// The order is not in `pending_payment` (or its deadline has passed): its state.
    Refused(Order),
    /// No such order of this user.
    NotFound,
}

/// `transition` of `user`'s order `id`. A payment needs the deadline not to have passed
/// (on Postgres's clock, the same one the sweeper uses): a payment and the sweeper at
/// the deadline cannot both succeed. A pending order found past its deadline is
/// refused as it stands; the sweeper expires it.
pub async fn transition(
    pool: &PgPool,
    id: Uuid,
    user: UserId,
    transition: Transition,
) -> anyhow::Result<Moved> {
    let mut tx = pool.begin().await?;
    let moved = match transition {
        Transition::Pay => {
            sqlx::query_as!(
                OrderRow,
                r#"UPDATE orders SET state = 'paid', state_changed_at = now()
                   WHERE id = $1 AND user_id = $2 AND state = 'pending_payment' AND pay_by > now()
                   RETURNING id, user_id, item_id, created_at, state, pay_by"#,
                id,
                user.get()
            )
            .fetch_optional(&mut *tx)
            .await?
        }
        Transition::Cancel => {
            let row = sqlx::query_as!(
                OrderRow,
                r#"UPDATE orders SET state = 'cancelled', state_changed_at = now()
                   WHERE id = $1 AND user_id = $2 AND state = 'pending_payment'
                   RETURNING id, user_id, item_id, created_at, state, pay_by"#,
                id,
                user.get()
            )
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(row) = &row {
                return_to_stock(&mut tx, &[row.item_id]).await?;
            }
            row
        }
    };
    if let Some(row) = moved {
        tx.commit().await?;
        return Ok(Moved::Done(row.try_into()?));
    }
    // Nothing was written: the connection goes back before the lookup takes another
    // (holding one while waiting for a second would starve the pool under a crowd).
    drop(tx);
    Ok(match super::order_by_id(pool, id).await? {
        Some(order) if order.user_id == user => Moved::Refused(order),
        _ => Moved::NotFound,
    })
}

/// Expires up to `limit` pending orders past their deadline, their units back in
/// `items` in the same transaction; answers the units Redis has to get back.
pub async fn expire_due(pool: &PgPool, limit: i64) -> anyhow::Result<Vec<GiveBack>> {
    let mut tx = pool.begin().await?;
    // SKIP LOCKED: an order a payment is changing right now is that payment's; if the
    // payment fails its deadline check, the next sweep takes the order.
    let rows = sqlx::query!(
        r#"UPDATE orders SET state = 'expired', state_changed_at = now()
           WHERE id IN (
             SELECT id FROM orders WHERE state = 'pending_payment' AND pay_by <= now()
             ORDER BY pay_by LIMIT $1 FOR UPDATE SKIP LOCKED)
           RETURNING id, user_id, item_id"#,
        limit
    )
    .fetch_all(&mut *tx)
    .await?;
    let items: Vec<i64> = rows.iter().map(|r| r.item_id).collect();
    return_to_stock(&mut tx, &items).await?;
    tx.commit().await?;
    rows.into_iter()
        .map(|r| GiveBack::parse(r.id, r.user_id, r.item_id))
        .collect()
}

/// One unit back to each item named (an item named twice gets two).
async fn return_to_stock(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    items: &[i64],
) -> anyhow::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    sqlx::query!(
        r#"UPDATE items SET remaining_stock = remaining_stock + back.units
           FROM (SELECT item, count(*)::int AS units FROM UNNEST($1::bigint[]) AS t (item) GROUP BY item) AS back
           WHERE items.id = back.item"#,
        items
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Items with released units Redis may not have got back yet (a crash between the two
/// stores, an item whose keys were lost): the sweeper works through them one item at a
/// time, so no item's trouble holds up another's returns.
pub async fn owing_items(pool: &PgPool) -> anyhow::Result<Vec<ItemId>> {
    sqlx::query_scalar!(
        r#"SELECT DISTINCT item_id AS "item_id!" FROM orders
           WHERE state IN ('cancelled', 'expired') AND returned_at IS NULL"#
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|id| Ok(ItemId::try_from(id)?))
    .collect()
}

/// Up to `limit` of `item`'s released orders not marked returned, oldest release first;
/// with `released_before`, only those released before it.
pub async fn unreturned(
    pool: &PgPool,
    item: ItemId,
    limit: i64,
    released_before: Option<chrono::DateTime<chrono::Utc>>,
) -> anyhow::Result<Vec<GiveBack>> {
    sqlx::query!(
        r#"SELECT id, user_id, item_id FROM orders
           WHERE item_id = $1 AND state IN ('cancelled', 'expired') AND returned_at IS NULL
             AND ($3::timestamptz IS NULL OR state_changed_at < $3)
           ORDER BY state_changed_at LIMIT $2"#,
        item.get(),
        limit,
        released_before
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| GiveBack::parse(r.id, r.user_id, r.item_id))
    .collect()
}

/// Records that these orders' units are back (in Redis, or in Postgres alone when the
/// item's keys are gone); answers how many were not marked before.
pub async fn mark_returned(pool: &PgPool, orders: &[Uuid]) -> anyhow::Result<u64> {
    if orders.is_empty() {
        return Ok(0);
    }
    Ok(sqlx::query!(
        "UPDATE orders SET returned_at = now() WHERE id = ANY($1) AND returned_at IS NULL",
        orders
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// How many orders of each of `items` are in each state: item id → state → count.
pub async fn states_by_item(
    pool: &PgPool,
    items: &[ItemId],
) -> anyhow::Result<BTreeMap<i64, BTreeMap<&'static str, i64>>> {
    let ids: Vec<i64> = items.iter().map(|i| i.get()).collect();
    let rows = sqlx::query!(
        r#"SELECT item_id, state, count(*) AS "count!" FROM orders
           WHERE item_id = ANY($1) GROUP BY item_id, state"#,
        &ids
    )
    .fetch_all(pool)
    .await?;
    let mut counts: BTreeMap<i64, BTreeMap<&'static str, i64>> = ids
        .iter()
        .map(|id| {
            (
                *id,
                OrderState::ALL.iter().map(|s| (s.as_str(), 0)).collect(),
            )
        })
        .collect();
    for row in rows {
        let state = row.state.parse::<OrderState>()?.as_str();
        counts
            .entry(row.item_id)
            .or_default()
            .insert(state, row.count);
    }
    Ok(counts)
}

/// How many orders of `item` are in each state.
pub async fn order_state_counts(
    pool: &PgPool,
    item: ItemId,
) -> anyhow::Result<Vec<(OrderState, i64)>> {
    sqlx::query!(
        r#"SELECT state, count(*) AS "count!" FROM orders WHERE item_id = $1 GROUP BY state"#,
        item.get()
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| Ok((r.state.parse()?, r.count)))
    .collect()
}
