//! `GET` and `PUT /admin/api/items/{id}/waiting-room`: an item's waiting room, its
//! settings and its figures.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use validator::Validate;

use crate::http::routes::items::item_id;
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::identity::Admin;
use crate::sale::item::ItemId;
use crate::sale::room::{InvalidRoom, RoomEdit, RoomError, RoomSettings, RoomStatus, WaitingRoom};
use crate::sale::Items;

/// An edit: every field optional; `prequeueStartsAt: null` removes the pre-queue.
/// Bounds are checked by the room's settings (`RoomConfig::edited`), which name the
/// field at fault.
#[derive(Debug, Deserialize, Validate, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoomRequest {
    enabled: Option<bool>,
    /// `fifo` or `random`.
    #[schema(example = "random")]
    order: Option<String>,
    /// Before the sale's start; `null`: joining opens at the start.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<DateTime<Utc>>)]
    prequeue_starts_at: Option<Option<DateTime<Utc>>>,
    #[schema(minimum = 1, maximum = 100_000)]
    admit_per_second: Option<i64>,
    #[schema(minimum = 1, maximum = 1_000_000)]
    max_active: Option<i64>,
    #[schema(minimum = 10, maximum = 3_600)]
    pass_ttl_secs: Option<i64>,
    #[schema(minimum = 10, maximum = 3_600)]
    abandon_after_secs: Option<i64>,
    /// A message to everyone waiting, shown as text on their next poll (at most 200
    /// characters, no control characters; `""` removes it).
    #[schema(max_length = 200)]
    message: Option<String>,
}

impl RoomRequest {
    /// The edit this request asks for; a bad `order` is refused here, every other bound by
    /// `RoomConfig::edited`. The one conversion, for the room's PUT and for the room made
    /// with its item (`POST /admin/api/items`'s `waitingRoom`).
    pub fn edit(self) -> Result<RoomEdit, InvalidRoom> {
        let order = match self.order.as_deref() {
            None => None,
            Some(word) => Some(word.parse().map_err(|_| InvalidRoom::Order)?),
        };
        Ok(RoomEdit {
            enabled: self.enabled,
            order,
            prequeue_starts_at: self.prequeue_starts_at,
            admit_per_second: self.admit_per_second,
            max_active: self.max_active,
            pass_ttl_secs: self.pass_ttl_secs,
            abandon_after_secs: self.abandon_after_secs,
            message: self.message,
        })
    }
}

/// A field that is present, even as `null` (absent: `None`).
fn present<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<DateTime<Utc>>>, D::Error> {
    Option::<DateTime<Utc>>::deserialize(d).map(Some)
}

/// The figures of a room, from this instance's copy.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoomFigures {
    joined: u64,
    waiting: u64,
    serving: u64,
    admitted: u64,
    live_passes: u64,
    abandoned: u64,
    admitted_last_minute: u64,
    sold_out: bool,
    /// Sold out and no unit can come back: the queue has ended (raising the item's
    /// stock reopens it).
    closed: bool,
    /// When it closed.
    closed_at: Option<DateTime<Utc>>,
}

/// An item's waiting room: its settings and figures.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoomBody {
    item_id: i64,
    #[serde(flatten)]
    settings: RoomSettings,
    /// Bumped by every change; 0 for a room never set.
    version: i64,
    status: RoomFigures,
}

impl RoomBody {
    fn new(item: ItemId, status: RoomStatus) -> Self {
        let room = &status.room;
        Self {
            item_id: item.get(),
            settings: room.settings(),
            version: room.version,
            status: RoomFigures {
                joined: status.joined,
                waiting: status.waiting,
                serving: status.serving,
                admitted: status.admitted,
                live_passes: status.live_passes,
                abandoned: status.abandoned,
                admitted_last_minute: status.admitted_last_minute,
                sold_out: status.sold_out,
                closed: status.closed_at_ms.is_some(),
                closed_at: status
                    .closed_at_ms
                    .and_then(DateTime::<Utc>::from_timestamp_millis),
            },
        }
    }
}

/// `GET /admin/api/items/{id}/waiting-room`: the room's settings and what it is doing.
#[utoipa::path(get, path = "/admin/api/items/{id}/waiting-room", operation_id = "getWaitingRoom", tag = "admin",
    params(("id" = i64, Path, description = "The item")),
    responses(
        (status = 200, description = "The room's settings and figures", body = RoomBody),
        (status = 404, description = "`ITEM_NOT_FOUND`", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn waiting_room(
    _admin: Admin,
    id: web::Path<i64>,
    room: web::Data<WaitingRoom>,
) -> Result<HttpResponse, ApiError> {
    let item = item_id(id.into_inner())?;
    Ok(HttpResponse::Ok().json(RoomBody::new(item, room.status(item)?)))
}

/// `PUT /admin/api/items/{id}/waiting-room`: changes the room's settings, merged over the
/// stored ones.
#[utoipa::path(put, path = "/admin/api/items/{id}/waiting-room", operation_id = "updateWaitingRoom", tag = "admin",
    params(("id" = i64, Path, description = "The item")),
    request_body = RoomRequest,
    responses(
        (status = 200, description = "The room as stored", body = RoomBody),
        (status = 400, description = "`VALIDATION_FAILED` with `field`", body = crate::http::api_error::ErrorBody),
        (status = 404, description = "`ITEM_NOT_FOUND`", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn update_waiting_room(
    admin: Admin,
    id: web::Path<i64>,
    body: JsonBody<RoomRequest>,
    room: web::Data<WaitingRoom>,
    items: web::Data<Items>,
) -> Result<HttpResponse, ApiError> {
    let item = item_id(id.into_inner())?;
    let edit = body.0.edit().map_err(RoomError::from)?;
    let saved = room.configure(item, &edit, &admin.name).await?;
    // The other instances reload the rooms' settings at once, not at their next tick.
    items.announce_change(item).await;
    tracing::info!(admin = %admin.name, item.id = %item, enabled = saved.enabled, version = saved.version, "admin changed a waiting room");
    Ok(HttpResponse::Ok().json(RoomBody::new(item, room.status(item)?)))
}
