//! The sale's Postgres side: items and orders. Postgres is the final truth: the
//! conditional decrement and the one-live-order-per-user index hold whatever Redis
//! believes; `life_cycle` has the orders' states.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::item::{Item, ItemId, NewItem};
use super::stock::RoomGate;
use crate::domain::UserId;
use crate::vocabulary::OrderState;

mod commit;
mod commit_connections;
mod item_edits;
mod life_cycle;
mod order_lines;

pub use commit::{
    commit_orders, forget_old_batches, settle, BatchKey, CommitError, ItemRefusal, NewOrder,
};
pub use commit_connections::{CommitConnections, CommitSession, CommitSessionCount};
pub use item_edits::{
    audit_creation, audit_reopen, edit_item, end_item, item_audit, items_with_figures, pause_item,
    record_room, AuditEntry, ChangeRefused, ItemFigures,
};
pub use life_cycle::{
    expire_due, mark_returned, order_state_counts, owing_items, states_by_item, transition,
    unreturned, GiveBack, Moved, Transition,
};
pub use order_lines::{order_lines_after, search_order_lines, OrderLine};

struct ItemRow {
    id: i64,
    name: String,
    price_cents: i64,
    total_stock: i32,
    remaining_stock: i32,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    paused: bool,
    archived_at: Option<DateTime<Utc>>,
}

impl TryFrom<ItemRow> for Item {
    type Error = anyhow::Error;

    fn try_from(row: ItemRow) -> anyhow::Result<Self> {
        Ok(Item {
            id: ItemId::try_from(row.id)?,
            name: row.name,
            price_cents: row.price_cents,
            total_stock: row.total_stock,
            remaining_stock: row.remaining_stock,
            starts_at: row.starts_at,
            ends_at: row.ends_at,
            paused: row.paused,
            archived_at: row.archived_at,
        })
    }
}

/// An order as stored: one per purchase admitted by Redis and committed to Postgres.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// Made by the purchase (a v7 UUID, so ids sort by creation); the API's order id.
    pub id: Uuid,
    /// The buyer.
    pub user_id: UserId,
    /// The item bought, one unit.
    pub item_id: ItemId,
    /// When it was committed.
    pub created_at: DateTime<Utc>,
    /// Where it is in its life (`pending_payment`, `paid`, …).
    pub state: OrderState,
    /// The payment deadline of a `pending_payment` order (orders from before the life
    /// cycle have none).
    pub pay_by: Option<DateTime<Utc>>,
}

struct OrderRow {
    id: Uuid,
    user_id: i64,
    item_id: i64,
    created_at: DateTime<Utc>,
    state: String,
    pay_by: Option<DateTime<Utc>>,
}

impl TryFrom<OrderRow> for Order {
    type Error = anyhow::Error;

    fn try_from(row: OrderRow) -> anyhow::Result<Self> {
        Ok(Order {
            id: row.id,
            user_id: UserId::try_from(row.user_id)?,
            item_id: ItemId::try_from(row.item_id)?,
            created_at: row.created_at,
            state: row.state.parse()?,
            pay_by: row.pay_by,
        })
    }
}

/// Stores a new item, its remaining stock its total, in `tx` (its audit, and its room
/// when it has one, go in the same transaction).
pub async fn insert_item(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    item: &NewItem,
) -> anyhow::Result<Item> {
    let row = sqlx::query_as!(
        ItemRow,
        r#"INSERT INTO items (name, price_cents, total_stock, remaining_stock, starts_at, ends_at)
           VALUES ($1, $2, $3, $3, $4, $5)
           RETURNING id, name, price_cents, total_stock, remaining_stock, starts_at, ends_at, paused, archived_at"#,
        item.name,
        item.price_cents,
        item.stock,
        item.starts_at,
        item.ends_at,
    )
    .fetch_one(&mut **tx)
    .await?;
    row.try_into()
}

/// The item, archived or not; `None` if no such id.
pub async fn item_by_id(pool: &PgPool, id: ItemId) -> anyhow::Result<Option<Item>> {
    sqlx::query_as!(
        ItemRow,
        "SELECT id, name, price_cents, total_stock, remaining_stock, starts_at, ends_at, paused, archived_at \
         FROM items WHERE id = $1",
        id.get()
    )
    .fetch_optional(pool)
    .await?
    .map(Item::try_from)
    .transpose()
}

/// Every item, archived ones included, in no order.
pub async fn all_items(pool: &PgPool) -> anyhow::Result<Vec<Item>> {
    sqlx::query_as!(
        ItemRow,
        "SELECT id, name, price_cents, total_stock, remaining_stock, starts_at, ends_at, paused, archived_at FROM items"
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(Item::try_from)
    .collect()
}

/// Which orders an operator wants to see. `page` starts at 1.
#[derive(Debug, Clone)]
pub struct OrderFilter {
    /// One order, by id.
    pub order: Option<Uuid>,
    /// Only this item's orders.
    pub item: Option<ItemId>,
    /// Only this user's orders.
    pub user: Option<UserId>,
    /// Created at or after this instant.
    pub from: Option<DateTime<Utc>>,
    /// Created before this instant.
    pub to: Option<DateTime<Utc>>,
    /// Only orders in this state.
    pub state: Option<OrderState>,
    /// The page, from 1.
    pub page: i64,
    /// Orders per page.
    pub per_page: i64,
}

/// What Postgres says of an item's units, read in one statement (one snapshot): the
/// source of a Redis rebuild (`lua/rebuild_item.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemLedger {
    /// `items.remaining_stock`: the units on sale, released ones included.
    pub remaining: i32,
    /// Released orders not marked returned: Redis may or may not have their units.
    pub owed: Vec<GiveBack>,
    /// Users holding a live order; without rebuys, everyone who ever ordered.
    pub buyers: Vec<i64>,
    /// Whether its waiting room is on (off, version 0, without a `waiting_rooms` row).
    pub room: RoomGate,
}

/// What Postgres says of `item`'s units, in one snapshot (see [`ItemLedger`]); `rebuy`
/// picks who counts as a buyer.
pub async fn item_ledger(pool: &PgPool, item: ItemId, rebuy: bool) -> anyhow::Result<ItemLedger> {
    let row = sqlx::query!(
        r#"SELECT remaining_stock,
             ARRAY(SELECT id FROM orders
                   WHERE item_id = $1 AND state IN ('cancelled', 'expired') AND returned_at IS NULL
                   ORDER BY id) AS "owed_orders!",
             ARRAY(SELECT user_id FROM orders
                   WHERE item_id = $1 AND state IN ('cancelled', 'expired') AND returned_at IS NULL
                   ORDER BY id) AS "owed_users!",
             ARRAY(SELECT DISTINCT user_id FROM orders
                   WHERE item_id = $1 AND ($2 OR state IN ('pending_payment', 'paid'))) AS "buyers!",
             COALESCE(rooms.enabled, false) AS "room_on!",
             COALESCE(rooms.version, 0) AS "room_version!"
           FROM items LEFT JOIN waiting_rooms rooms ON rooms.item_id = items.id
           WHERE items.id = $1"#,
        item.get(),
        !rebuy
    )
    .fetch_one(pool)
    .await?;
    let owed = row
        .owed_orders
        .into_iter()
        .zip(row.owed_users)
        .map(|(order, user)| GiveBack::parse(order, user, item.get()))
        .collect::<anyhow::Result<_>>()?;
    Ok(ItemLedger {
        remaining: row.remaining_stock,
        owed,
        buyers: row.buyers,
        room: RoomGate {
            version: row.room_version,
            on: row.room_on,
        },
    })
}

/// Every item's waiting room as the gate must hold it (items without a `waiting_rooms`
/// row are off, version 0: they are not listed).
pub async fn room_gates(pool: &PgPool) -> anyhow::Result<HashMap<ItemId, RoomGate>> {
    let rows = sqlx::query!("SELECT item_id, enabled, version FROM waiting_rooms")
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let gate = RoomGate {
                version: row.version,
                on: row.enabled,
            };
            Some((ItemId::try_from(row.item_id).ok()?, gate))
        })
        .collect())
}

/// Orders of `item` that hold a unit in Redis (`returned_at IS NULL`: the live ones,
/// and dead ones whose unit Redis has not got back yet, less those Redis says it has
/// back, `returning`), and how many of `among` are among them.
/// The item's total stock as stored now (an operator may have changed it since the
/// catalog was read), its orders holding a unit, and how many of those are `among`.
pub async fn order_counts(
    pool: &PgPool,
    item: ItemId,
    among: &[Uuid],
    returning: &[Uuid],
) -> anyhow::Result<(i32, i64, i64)> {
    let row = sqlx::query!(
        r#"SELECT (SELECT total_stock FROM items WHERE id = $1) AS "total!",
               count(*) AS "orders!", count(*) FILTER (WHERE id = ANY($2)) AS "among!"
           FROM orders WHERE item_id = $1 AND returned_at IS NULL AND NOT (id = ANY($3))"#,
        item.get(),
        among,
        returning
    )
    .fetch_one(pool)
    .await?;
    Ok((row.total, row.orders, row.among))
}

/// How many items exist: the demo item is seeded only when there are none.
pub async fn item_count(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM items"#)
            .fetch_one(pool)
            .await?,
    )
}

/// Who Redis must remember as buyers of `item`: the users whose order holds a unit in
/// Redis (as [`order_counts`] counts them), or, when a released order does not free its
/// buyer to buy again (`rebuy` off), everyone who ever ordered it.
pub async fn buyers(
    pool: &PgPool,
    item: ItemId,
    rebuy: bool,
    returning: &[Uuid],
) -> anyhow::Result<Vec<i64>> {
    Ok(sqlx::query_scalar!(
        "SELECT DISTINCT user_id FROM orders
         WHERE item_id = $1 AND ($2 OR (returned_at IS NULL AND NOT (id = ANY($3))))",
        item.get(),
        !rebuy,
        returning
    )
    .fetch_all(pool)
    .await?)
}

/// Everyone who ever ordered `item` (the buyers Redis keeps without rebuys).
pub async fn buyer_count(pool: &PgPool, item: ItemId) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar!(
        r#"SELECT count(DISTINCT user_id) AS "count!" FROM orders WHERE item_id = $1"#,
        item.get()
    )
    .fetch_one(pool)
    .await?)
}

/// The user's orders, newest first.
pub async fn orders_of_user(pool: &PgPool, user: UserId) -> anyhow::Result<Vec<Order>> {
    sqlx::query_as!(
        OrderRow,
        "SELECT id, user_id, item_id, created_at, state, pay_by FROM orders WHERE user_id = $1 ORDER BY created_at DESC",
        user.get()
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(Order::try_from)
    .collect()
}

/// The order by that id, whoever's it is (the caller checks ownership).
pub async fn order_by_id(pool: &PgPool, id: Uuid) -> anyhow::Result<Option<Order>> {
    sqlx::query_as!(
        OrderRow,
        "SELECT id, user_id, item_id, created_at, state, pay_by FROM orders WHERE id = $1",
        id
    )
    .fetch_optional(pool)
    .await?
    .map(Order::try_from)
    .transpose()
}

/// The user's live order (`pending_payment` or `paid`) of the item, if any.
pub async fn order_of(pool: &PgPool, user: UserId, item: ItemId) -> anyhow::Result<Option<Order>> {
    sqlx::query_as!(
        OrderRow,
        "SELECT id, user_id, item_id, created_at, state, pay_by FROM orders
         WHERE user_id = $1 AND item_id = $2 AND state IN ('pending_payment', 'paid')",
        user.get(),
        item.get()
    )
    .fetch_optional(pool)
    .await?
    .map(Order::try_from)
    .transpose()
}

/// Orders by id, in no particular order.
pub(super) async fn orders_by_id<'c>(
    db: impl sqlx::PgExecutor<'c>,
    ids: &[Uuid],
) -> anyhow::Result<Vec<Order>> {
    sqlx::query_as!(
        OrderRow,
        "SELECT id, user_id, item_id, created_at, state, pay_by FROM orders WHERE id = ANY($1)",
        ids
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(Order::try_from)
    .collect()
}
