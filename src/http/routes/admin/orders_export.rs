//! `GET /admin/api/orders.csv`: every order matching the filters, as CSV, streamed a
//! batch at a time ([`super::csv_export`]).

use actix_web::{web, HttpResponse};

use super::csv_export::{streamed, text};
use super::{order_filter, OrdersQuery};
use crate::http::ApiError;
use crate::http::QueryParams;
use crate::identity::Admin;
use crate::sale::records::OrderLine;
use crate::sale::Orders;

/// Orders read per batch.
const BATCH: i64 = 1_000;

const HEADER: &str =
    "order_id,item_id,item_name,user_id,state,amount_cents,created_at,pay_by,paid_at\n";

fn row(line: &OrderLine) -> String {
    let order = &line.order;
    let time =
        |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| t.to_rfc3339()).unwrap_or_default();
    format!(
        "{},{},{},{},{},{},{},{},{}\n",
        order.id,
        order.item_id,
        text(&line.item_name),
        order.user_id,
        order.state.as_str(),
        line.amount_cents,
        order.created_at.to_rfc3339(),
        time(order.pay_by),
        time(line.paid_at),
    )
}

/// `GET /admin/api/orders.csv`: every order matching the filters, as CSV.
#[utoipa::path(get, path = "/admin/api/orders.csv", operation_id = "exportOrders", tag = "admin", params(OrdersQuery),
    responses(
        (status = 200, description = "Every matching order, newest first, as CSV with a header row", content_type = "text/csv", body = String),
        (status = 400, description = "`VALIDATION_FAILED`: `field` names the query parameter", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn orders_csv(
    _admin: Admin,
    query: QueryParams<OrdersQuery>,
    orders: web::Data<Orders>,
) -> Result<HttpResponse, ApiError> {
    let filter = order_filter(query.into_inner())?;
    Ok(streamed(
        "orders.csv",
        HEADER.to_string(),
        None,
        move |cursor| {
            let (orders, filter) = (orders.clone(), filter.clone());
            async move {
                let lines = orders.lines_after(&filter, cursor, BATCH).await?;
                let next = lines.last().map(|l| (l.order.created_at, l.order.id));
                let chunk: String = lines.iter().map(row).collect();
                let more = (lines.len() as i64) == BATCH;
                Ok((chunk, more.then_some(next)))
            }
        },
    ))
}
