//! `GET /admin/api/offenders` (the top refused users and addresses of a window, with
//! their labels) and `/admin/api/blocks` (the operator's blocks: set, list, lift), over
//! `history::offenders` and `history::blocks`.

use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use validator::Validate;

use crate::history::blocks::{Applied, Block, BlockAudit, BlockError, BlockStore, Target};
use crate::history::offenders::{self, AddressOffender, UserOffender, Window};
use crate::http::ApiError;
use crate::http::JsonBody;
use crate::http::QueryParams;
use crate::identity::Admin;

/// The query of `GET /admin/api/offenders`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OffendersQuery {
    /// `60` (the last complete minute) or `3600` (the last 60 complete minutes).
    window: String,
    /// Only this item's refusals.
    item: Option<i64>,
}

/// The top offenders of a window.
#[derive(Serialize, utoipa::ToSchema)]
pub struct OffendersBody {
    /// The window, in seconds.
    window: i64,
    /// The minutes covered: `[from, to)`.
    from: chrono::DateTime<chrono::Utc>,
    to: chrono::DateTime<chrono::Utc>,
    /// The 20 most refused users, the most first.
    users: Vec<UserOffender>,
    /// The 20 most refused addresses, the most first.
    addresses: Vec<AddressOffender>,
}

/// `GET /admin/api/offenders?window=60|3600&item=`.
#[utoipa::path(get, path = "/admin/api/offenders", operation_id = "listOffenders", tag = "admin", params(OffendersQuery),
    description = "The top 20 refused users and addresses of the window, merged from every instance's per-minute heavy hitters, each with its refusals by dimension and its label (`shared_address`, `scripted_account`, `burst_source`, `queue_farmer`, or null).",
    responses(
        (status = 200, description = "The offenders", body = OffendersBody),
        (status = 400, description = "`VALIDATION_FAILED`: `window` is not 60 or 3600, or `item` is not a number"),
        (status = 404, description = "`ITEM_NOT_FOUND`: `item` is no item's id (0 or less)"),
    ))]
pub async fn offenders(
    _admin: Admin,
    query: QueryParams<OffendersQuery>,
    pool: web::Data<PgPool>,
) -> Result<HttpResponse, ApiError> {
    let query = query.into_inner();
    let window = Window::from_secs(&query.window)
        .ok_or_else(|| ApiError::validation("window", "window is 60 or 3600 (seconds)"))?;
    let item = query
        .item
        .map(|item| crate::http::routes::items::item_id(item).map(|id| id.get()))
        .transpose()?;
    let top = offenders::top(&pool, window, item).await?;
    Ok(HttpResponse::Ok().json(OffendersBody {
        window: window.secs(),
        from: top.from,
        to: top.to,
        users: UserOffender::all(top.users),
        addresses: AddressOffender::all(top.addresses),
    }))
}

/// The body of `POST /admin/api/blocks`.
#[derive(Debug, Deserialize, Validate, utoipa::ToSchema)]
pub struct BlockRequest {
    /// `user` or `ip`.
    #[schema(example = "ip")]
    kind: String,
    /// A user id, or an address (an IPv6 address is blocked by its /64).
    #[schema(example = "203.0.113.9")]
    value: String,
    /// How long, from 1 to `history.block_max_secs` (a week by default).
    #[schema(example = 3600)]
    seconds: i64,
    /// Why, for the list and the audit (at most 200 characters).
    #[serde(default)]
    reason: String,
}

/// A change's answer: the block (for a block), the version, and who had not applied it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct BlockChange {
    #[serde(skip_serializing_if = "Option::is_none")]
    block: Option<Block>,
    #[serde(flatten)]
    applied: Applied,
}

/// The blocks in force and the latest changes.
#[derive(Serialize, utoipa::ToSchema)]
pub struct BlockList {
    /// In force, the newest first.
    blocks: Vec<Block>,
    /// The latest 100 changes, the newest first.
    audit: Vec<BlockAudit>,
}

/// `POST /admin/api/blocks`: blocks a user or an address for a time.
#[utoipa::path(post, path = "/admin/api/blocks", operation_id = "createBlock", tag = "admin", request_body = BlockRequest,
    description = "Blocks a user or an address (403 `BLOCKED` on the purchase, the queue's join and poll, `/api/limited` and the shopper's orders), audited. Answers once every instance beating in the limiter's heartbeat set has applied it, or after 2 s with `unconfirmed` naming those that had not.",
    responses(
        (status = 201, description = "The block, in force", body = BlockChange),
        (status = 400, description = "`VALIDATION_FAILED`: `kind`, `value` (unparsable, loopback, a trusted proxy, or the list is full), `seconds` (0 or past `history.block_max_secs`) or `reason`"),
    ))]
pub async fn create_block(
    admin: Admin,
    body: JsonBody<BlockRequest>,
    store: web::Data<BlockStore>,
) -> Result<HttpResponse, ApiError> {
    let request = body.0;
    let block = store
        .parse(
            &request.kind,
            &request.value,
            request.seconds,
            &request.reason,
        )
        .map_err(|e| ApiError::validation(e.field, e.message))?;
    let (block, applied) = store
        .block(&block, &admin.name)
        .await
        .map_err(block_error)?;
    Ok(HttpResponse::Created().json(BlockChange {
        block: Some(block),
        applied,
    }))
}

/// `GET /admin/api/blocks`.
#[utoipa::path(get, path = "/admin/api/blocks", operation_id = "listBlocks", tag = "admin",
    responses((status = 200, description = "The blocks in force and the latest 100 changes", body = BlockList)))]
pub async fn list_blocks(
    _admin: Admin,
    store: web::Data<BlockStore>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(BlockList {
        blocks: store.list().await?,
        audit: store.audit(100).await?,
    }))
}

/// `DELETE /admin/api/blocks/{kind}/{value}`: lifts a block.
#[utoipa::path(delete, path = "/admin/api/blocks/{kind}/{value}", operation_id = "deleteBlock", tag = "admin",
    params(
        ("kind" = String, Path, description = "`user` or `ip`"),
        ("value" = String, Path, description = "The user id or the address, percent-encoded (`2001%3Adb8%3A%3A1`, or the listed `2001%3Adb8%3A%3A%2F64`)"),
    ),
    responses(
        (status = 200, description = "Lifted; `unconfirmed` names the instances that had not applied it within 2 s", body = BlockChange),
        (status = 400, description = "`VALIDATION_FAILED`: `kind` or `value`"),
        (status = 404, description = "`NOT_FOUND`: no such block in force"),
    ))]
pub async fn delete_block(
    admin: Admin,
    req: HttpRequest,
    store: web::Data<BlockStore>,
) -> Result<HttpResponse, ApiError> {
    let segment = |name: &str| percent_decoded(req.match_info().get(name).unwrap_or_default());
    let target = Target::parse(&segment("kind"), &segment("value"), &store.limits().guarded)
        .map_err(|e| ApiError::validation(e.field, e.message))?;
    let applied = store
        .unblock(target, &admin.name)
        .await
        .map_err(block_error)?;
    Ok(HttpResponse::Ok().json(BlockChange {
        block: None,
        applied,
    }))
}

fn block_error(error: BlockError) -> ApiError {
    match error {
        BlockError::Invalid(invalid) => ApiError::validation(invalid.field, invalid.message),
        BlockError::NotFound => ApiError::NotFound,
        BlockError::Store(cause) => ApiError::Internal(cause),
    }
}

/// The router leaves `%2F`, `%25` and `%2B` encoded in a segment (they would change its
/// meaning); a value is one segment, so they are decoded here. A malformed escape stays
/// as it is (and the value then fails to parse).
fn percent_decoded(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_segment_left_encoded_is_decoded_once() {
        assert_eq!(super::percent_decoded("2001:db8::%2F64"), "2001:db8::/64");
        assert_eq!(super::percent_decoded("2001%3adb8%3A%3A1"), "2001:db8::1");
        assert_eq!(super::percent_decoded("a%2"), "a%2");
    }
}
