//! `GET /admin/api/orders.csv`: every order matching the filters, as CSV, streamed a
//! batch at a time (bounded memory whatever the count; no Postgres connection held
//! between batches).

use actix_web::web::Bytes;
use actix_web::{web, HttpResponse};
use futures_util::stream;

use super::{order_filter, OrdersQuery};
use crate::http::ApiError;
use crate::http::QueryParams;
use crate::identity::Admin;
use crate::sale::records::{OrderFilter, OrderLine};
use crate::sale::Orders;

/// Orders read per batch.
const BATCH: i64 = 1_000;

const HEADER: &str =
    "order_id,item_id,item_name,user_id,state,amount_cents,created_at,pay_by,paid_at\n";

/// A text field for a spreadsheet: quoted when it holds a comma, a quote or a line
/// break, and never read as a formula (a leading `=`, `+`, `-`, `@` gets a `'`).
fn text(field: &str) -> String {
    let field = if field.starts_with(['=', '+', '-', '@']) {
        format!("'{field}")
    } else {
        field.to_string()
    };
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field
    }
}

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

/// Where the export stands between batches.
enum Export {
    Header(web::Data<Orders>, OrderFilter),
    After(
        web::Data<Orders>,
        OrderFilter,
        Option<(chrono::DateTime<chrono::Utc>, uuid::Uuid)>,
    ),
    Done,
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
    let body = stream::unfold(Export::Header(orders, filter), |state| async move {
        match state {
            Export::Header(orders, filter) => Some((
                Ok(Bytes::from_static(HEADER.as_bytes())),
                Export::After(orders, filter, None),
            )),
            Export::After(orders, filter, cursor) => {
                match orders.lines_after(&filter, cursor, BATCH).await {
                    Ok(lines) if lines.is_empty() => None,
                    Ok(lines) => {
                        let next = lines.last().map(|l| (l.order.created_at, l.order.id));
                        let chunk: String = lines.iter().map(row).collect();
                        let state = if (lines.len() as i64) < BATCH {
                            Export::Done
                        } else {
                            Export::After(orders, filter, next)
                        };
                        Some((Ok(Bytes::from(chunk)), state))
                    }
                    Err(e) => {
                        // The status is sent already: cutting the body short is all that is
                        // left, and the client sees an incomplete download.
                        tracing::error!(error = %format!("{e:#}"), "order export failed");
                        Some((
                            Err(actix_web::error::ErrorInternalServerError("export failed")),
                            Export::Done,
                        ))
                    }
                }
            }
            Export::Done => None,
        }
    });
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header(("Content-Disposition", "attachment; filename=\"orders.csv\""))
        .streaming(body))
}

#[cfg(test)]
mod tests {
    use super::text;

    #[test]
    fn a_field_is_quoted_when_it_must_be_and_never_a_formula() {
        assert_eq!(text("Phone"), "Phone");
        assert_eq!(text("a, b"), "\"a, b\"");
        assert_eq!(text("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(text("=HYPERLINK(1)"), "'=HYPERLINK(1)");
        assert_eq!(text("-1,2"), "\"'-1,2\"");
    }
}
