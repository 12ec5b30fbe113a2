//! An item's life after its creation, in Postgres: edits, the end, the archive, and the
//! audit of every operator's change (`item_audit`). Each change is one transaction: the
//! item's row locked, the change checked against what is stored, applied, audited.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::types::Json;
use sqlx::{PgPool, Postgres, Transaction};

use super::ItemRow;
use crate::sale::item::{Item, ItemEdit, ItemId};
use crate::sale::room::RoomConfig;
use crate::vocabulary::{ItemAction, Word};

/// One audited change.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    /// What the operator did.
    pub action: ItemAction,
    /// Who did it: the admin token's name.
    pub changed_by: String,
    /// When, on Postgres's clock.
    pub changed_at: DateTime<Utc>,
    /// The changed fields before (`None` for a creation).
    pub old: Option<Value>,
    /// The changed fields after.
    pub new: Value,
}

/// Why a change was not made.
#[derive(Debug, thiserror::Error)]
pub enum ChangeRefused {
    /// No item by that id.
    #[error("no such item")]
    NotFound,
    /// An archived item takes no change.
    #[error("the item is archived")]
    Archived,
    /// An edit of the end of a sale an operator ended: an operator's end is final.
    #[error("an operator ended this sale: its end cannot be moved")]
    EndedByOperator,
    /// The stored total moved since the caller read it (another stock edit).
    #[error("the item's stock changed meanwhile")]
    StockMoved,
    /// Postgres failed; nothing was changed.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

impl From<sqlx::Error> for ChangeRefused {
    fn from(e: sqlx::Error) -> Self {
        Self::Failed(e.into())
    }
}

/// The fields of an item an audit entry shows, in the API's spelling.
fn fields(item: &Item) -> Value {
    json!({
        "name": item.name,
        "priceCents": item.price_cents,
        "stock": item.total_stock,
        "startsAt": item.starts_at,
        "endsAt": item.ends_at,
        "paused": item.paused,
        "archivedAt": item.archived_at,
    })
}

async fn locked(tx: &mut Transaction<'_, Postgres>, id: ItemId) -> Result<Item, ChangeRefused> {
    let row = sqlx::query_as!(
        ItemRow,
        "SELECT id, name, price_cents, total_stock, remaining_stock, starts_at, ends_at, paused, \
         archived_at FROM items WHERE id = $1 FOR UPDATE",
        id.get()
    )
    .fetch_optional(&mut **tx)
    .await?
    .ok_or(ChangeRefused::NotFound)?;
    Ok(Item::try_from(row)?)
}

async fn record(
    tx: &mut Transaction<'_, Postgres>,
    item: ItemId,
    action: ItemAction,
    by: &str,
    old: Option<&Item>,
    new: &Item,
) -> Result<(), ChangeRefused> {
    entry(tx, item, action, by, old.map(fields), fields(new)).await?;
    Ok(())
}

/// Writes one entry of the item's history: the one insert every kind of entry goes
/// through.
async fn entry(
    tx: &mut Transaction<'_, Postgres>,
    item: ItemId,
    action: ItemAction,
    by: &str,
    old: Option<Value>,
    new: Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "INSERT INTO item_audit (item_id, action, changed_by, old_values, new_values) \
         VALUES ($1, $2, $3, $4, $5)",
        item.get(),
        action.label(),
        by,
        old.map(Json) as _,
        Json(new) as _,
    )
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The item's history entry of a closed room reopened by a stock raise (action `room`):
/// old `{"closed": true, "closedAt": …}`, new `{"closed": false}`.
async fn record_reopen(
    tx: &mut Transaction<'_, Postgres>,
    item: ItemId,
    closed_at: DateTime<Utc>,
    by: &str,
) -> Result<(), ChangeRefused> {
    let old = json!({ "closed": true, "closedAt": closed_at });
    entry(
        tx,
        item,
        ItemAction::Room,
        by,
        Some(old),
        json!({ "closed": false }),
    )
    .await?;
    Ok(())
}

/// Records that a stock raise reopened the item's closed room, in a transaction of its
/// own: for a room that closed between the edit's read of it and its raise in Redis.
pub async fn audit_reopen(
    pool: &PgPool,
    item: ItemId,
    closed_at: DateTime<Utc>,
    by: &str,
) -> Result<(), ChangeRefused> {
    let mut tx = pool.begin().await?;
    record_reopen(&mut tx, item, closed_at, by).await?;
    tx.commit().await?;
    Ok(())
}

/// Records an item's creation (its first audit entry), in the transaction that inserts
/// it.
pub async fn audit_creation(
    tx: &mut Transaction<'_, Postgres>,
    item: &Item,
    by: &str,
) -> anyhow::Result<()> {
    record(tx, item.id, ItemAction::Create, by, None, item)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Records a change of `item`'s waiting room (action `room`): its whole settings before
/// and after, in the API's spelling (`RoomConfig::settings`), by `by`. Called in the
/// transaction that writes `waiting_rooms`, so a room never changes unrecorded: the
/// operator's edit, the room made with its item, a room reopened by a stock raise.
pub async fn record_room(
    tx: &mut Transaction<'_, Postgres>,
    item: ItemId,
    by: &str,
    old: &RoomConfig,
    new: &RoomConfig,
) -> anyhow::Result<()> {
    let settings = |room: &RoomConfig| serde_json::to_value(room.settings());
    entry(
        tx,
        item,
        ItemAction::Room,
        by,
        Some(settings(old)?),
        settings(new)?,
    )
    .await?;
    Ok(())
}

/// Applies `edit`; a stock change adds `stock_delta` to the total and the remaining
/// count, and only if the stored total is still `expected_total`. `reopens`: the raise
/// reopens the item's waiting room, closed since then: recorded in the same transaction.
pub async fn edit_item(
    pool: &PgPool,
    id: ItemId,
    edit: &ItemEdit,
    stock: Option<(i32, i32)>,
    reopens: Option<DateTime<Utc>>,
    by: &str,
) -> Result<Item, ChangeRefused> {
    let mut tx = pool.begin().await?;
    let old = locked(&mut tx, id).await?;
    if old.archived_at.is_some() {
        return Err(ChangeRefused::Archived);
    }
    if edit.ends_at.is_some() && ended_by_operator(&mut tx, id).await?.is_some() {
        return Err(ChangeRefused::EndedByOperator);
    }
    let delta = match stock {
        Some((expected_total, _)) if expected_total != old.total_stock => {
            return Err(ChangeRefused::StockMoved)
        }
        Some((_, delta)) => delta,
        None => 0,
    };
    let row = sqlx::query_as!(
        ItemRow,
        r#"UPDATE items SET name = COALESCE($2, name), price_cents = COALESCE($3, price_cents),
               ends_at = COALESCE($4, ends_at), total_stock = total_stock + $5,
               remaining_stock = remaining_stock + $5
           WHERE id = $1
           RETURNING id, name, price_cents, total_stock, remaining_stock, starts_at, ends_at, paused, archived_at"#,
        id.get(),
        edit.name,
        edit.price_cents,
        edit.ends_at,
        delta,
    )
    .fetch_one(&mut *tx)
    .await?;
    let new = Item::try_from(row)?;
    record(&mut tx, id, ItemAction::Edit, by, Some(&old), &new).await?;
    if let (Some(closed_at), true) = (reopens, delta > 0) {
        record_reopen(&mut tx, id, closed_at, by).await?;
    }
    tx.commit().await?;
    Ok(new)
}

/// When an operator ended the item's sale, if one did (the row is locked by the caller).
async fn ended_by_operator(
    tx: &mut Transaction<'_, Postgres>,
    id: ItemId,
) -> Result<Option<DateTime<Utc>>, ChangeRefused> {
    Ok(sqlx::query_scalar!(
        "SELECT ended_by_operator_at FROM items WHERE id = $1",
        id.get()
    )
    .fetch_one(&mut **tx)
    .await?)
}

/// Ends the sale now (an item not started yet starts and ends now), for good (an edit
/// of its end is refused from then on, `ended_by_operator_at`); with `archive`,
/// archives it too. Ending an ended item or archiving an archived one changes nothing,
/// but that a sale which had ended on its own is now ended by an operator too.
///
/// "Now" is the clock once the row is locked (`clock_timestamp()`): an order committed
/// before holds the lock first, so its `created_at` is before the end, and one
/// committed after is refused by the commit's own check (`commit::commit_orders`).
pub async fn end_item(
    pool: &PgPool,
    id: ItemId,
    archive: bool,
    by: &str,
) -> Result<Item, ChangeRefused> {
    let mut tx = pool.begin().await?;
    let old = locked(&mut tx, id).await?;
    if old.archived_at.is_some() {
        return if archive {
            Ok(old)
        } else {
            Err(ChangeRefused::Archived)
        };
    }
    let was_ended_by_operator = ended_by_operator(&mut tx, id).await?.is_some();
    let row = sqlx::query_as!(
        ItemRow,
        r#"UPDATE items SET
               starts_at = LEAST(starts_at, c.at - interval '1 millisecond'),
               ends_at = LEAST(ends_at, c.at),
               archived_at = CASE WHEN $2 THEN c.at ELSE archived_at END,
               ended_by_operator_at = COALESCE(ended_by_operator_at, c.at)
           FROM (SELECT clock_timestamp() AS at) AS c
           WHERE id = $1
           RETURNING id, name, price_cents, total_stock, remaining_stock, starts_at, ends_at, paused, archived_at"#,
        id.get(),
        archive,
    )
    .fetch_one(&mut *tx)
    .await?;
    let new = Item::try_from(row)?;
    if new != old || !was_ended_by_operator {
        let action = if archive {
            ItemAction::Archive
        } else {
            ItemAction::End
        };
        record(&mut tx, id, action, by, Some(&old), &new).await?;
    }
    tx.commit().await?;
    Ok(new)
}

/// Pauses or resumes a sale, audited; `None` when there is no such item.
pub async fn pause_item(
    pool: &PgPool,
    id: ItemId,
    paused: bool,
    by: &str,
) -> Result<Item, ChangeRefused> {
    let mut tx = pool.begin().await?;
    let old = locked(&mut tx, id).await?;
    let row = sqlx::query_as!(
        ItemRow,
        r#"UPDATE items SET paused = $2 WHERE id = $1
           RETURNING id, name, price_cents, total_stock, remaining_stock, starts_at, ends_at, paused, archived_at"#,
        id.get(),
        paused
    )
    .fetch_one(&mut *tx)
    .await?;
    let new = Item::try_from(row)?;
    if new != old {
        let action = if paused {
            ItemAction::Pause
        } else {
            ItemAction::Resume
        };
        record(&mut tx, id, action, by, Some(&old), &new).await?;
    }
    tx.commit().await?;
    Ok(new)
}

/// The item's audit, newest first (at most 500 entries).
pub async fn item_audit(pool: &PgPool, id: ItemId) -> anyhow::Result<Vec<AuditEntry>> {
    let rows = sqlx::query!(
        r#"SELECT action, changed_by, changed_at, old_values AS "old: Json<Value>",
               new_values AS "new!: Json<Value>"
           FROM item_audit WHERE item_id = $1 ORDER BY changed_at DESC, id DESC LIMIT 500"#,
        id.get()
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(AuditEntry {
                action: ItemAction::from_label(&row.action)?,
                changed_by: row.changed_by,
                changed_at: row.changed_at,
                old: row.old.map(|j| j.0),
                new: row.new.0,
            })
        })
        .collect()
}

/// An item with what it sold: the operators' list.
#[derive(Debug, Clone)]
pub struct ItemFigures {
    /// The item as stored.
    pub item: Item,
    /// Live orders (awaiting payment or paid).
    pub sold: i64,
    /// Orders awaiting payment.
    pub held: i64,
    /// Paid orders' amounts (the price each was bought at).
    pub revenue_cents: i64,
    /// When the last unit went, if every unit has gone: the last live order's time.
    pub sold_out_at: Option<DateTime<Utc>>,
}

/// Every item (archived ones only with `archived`; only `only` when given), newest
/// first, at most 500, with their orders' figures.
pub async fn items_with_figures(
    pool: &PgPool,
    archived: bool,
    only: Option<ItemId>,
) -> anyhow::Result<Vec<ItemFigures>> {
    let rows = sqlx::query!(
        r#"SELECT i.id, i.name, i.price_cents, i.total_stock, i.remaining_stock, i.starts_at,
               i.ends_at, i.paused, i.archived_at,
               count(o.id) FILTER (WHERE o.state IN ('pending_payment', 'paid')) AS "sold!",
               count(o.id) FILTER (WHERE o.state = 'pending_payment') AS "held!",
               coalesce(sum(COALESCE(o.price_cents, i.price_cents)) FILTER (WHERE o.state = 'paid'), 0)::BIGINT AS "revenue!",
               max(o.created_at) FILTER (WHERE o.state IN ('pending_payment', 'paid')) AS last_sale
           FROM items i LEFT JOIN orders o ON o.item_id = i.id
           WHERE ($1 OR i.archived_at IS NULL) AND ($2::bigint IS NULL OR i.id = $2)
           GROUP BY i.id
           ORDER BY i.created_at DESC, i.id DESC
           LIMIT 500"#,
        archived,
        only.map(ItemId::get),
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|row| {
            let item = Item::try_from(ItemRow {
                id: row.id,
                name: row.name,
                price_cents: row.price_cents,
                total_stock: row.total_stock,
                remaining_stock: row.remaining_stock,
                starts_at: row.starts_at,
                ends_at: row.ends_at,
                paused: row.paused,
                archived_at: row.archived_at,
            })?;
            let sold_out_at = (row.sold >= i64::from(item.total_stock))
                .then_some(row.last_sale)
                .flatten();
            Ok(ItemFigures {
                item,
                sold: row.sold,
                held: row.held,
                revenue_cents: row.revenue,
                sold_out_at,
            })
        })
        .collect()
}
