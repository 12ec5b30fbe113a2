//! `GET /admin/api/history` (the per-minute rows, JSON or streamed CSV),
//! `GET /admin/api/history/samples` (the sampled refusals, personal data) and
//! `GET /admin/api/items/{id}/report` (a report per sale): what the sale remembers
//! (docs/history.md, "History and reports").

use actix_web::http::header::ACCEPT;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use super::csv_export::{streamed, text};
use super::storable;
use crate::configuration::HistorySettings;
use crate::history::report::{sale_report, SaleReport};
use crate::history::rows::{self, Cursor, HistoryQuery, HistoryRow, HistoryStep};
use crate::history::samples::{self, SampledRefusal};
use crate::http::routes::items::item_id;
use crate::http::ApiError;
use crate::http::QueryParams;
use crate::identity::Admin;
use crate::sale::item::ItemId;
use crate::sale::{Items, SaleError};

/// Rows read per batch of the CSV.
const BATCH: i64 = 1_000;

/// An answer's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// JSON (the default).
    Json,
    /// CSV, with a header row.
    Csv,
}

/// `format=` when given, else CSV when the request accepts `text/csv`, else JSON.
fn format_of(format: Option<Format>, request: &HttpRequest) -> Format {
    format.unwrap_or_else(|| {
        let accepts_csv = request
            .headers()
            .get(ACCEPT)
            .and_then(|a| a.to_str().ok())
            .is_some_and(|a| a.contains("text/csv"));
        if accepts_csv {
            Format::Csv
        } else {
            Format::Json
        }
    })
}

/// A refused history query as the API answers it: 400 naming the parameter.
fn refused(e: rows::HistoryRefused) -> ApiError {
    ApiError::validation(e.field(), e.to_string())
}

/// The query of the history's parameters, each checked: the range storable and bounded,
/// the item an item's id, the policy a policy's name.
fn query_of(
    (from, to): (Option<DateTime<Utc>>, Option<DateTime<Utc>>),
    step: HistoryStep,
    item: Option<i64>,
    policy: Option<String>,
    settings: &HistorySettings,
) -> Result<HistoryQuery, ApiError> {
    HistoryQuery::new(
        from.map(|t| storable("from", t)).transpose()?,
        to.map(|t| storable("to", t)).transpose()?,
        step,
        item.map(|i| ItemId::try_from(i).map_err(|e| ApiError::validation("item", e.to_string())))
            .transpose()?,
        policy,
        settings,
    )
    .map_err(refused)
}

/// The query of `GET /admin/api/history`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// Only this item's rows (purchases and its room); without `policy`, no decisions.
    item: Option<i64>,
    /// Only this policy's decisions; without `item`, no item or room rows.
    policy: Option<String>,
    /// RFC 3339, included; a day before `to` when absent.
    from: Option<DateTime<Utc>>,
    /// RFC 3339, excluded; now when absent. At most `history.max_range_days` after `from`.
    to: Option<DateTime<Utc>>,
    /// `minute` (the default) or `hour` (each hour's minutes summed, UTC).
    #[param(inline)]
    step: Option<HistoryStep>,
    /// `json` or `csv`; without it, CSV when `Accept` names `text/csv`.
    #[param(inline)]
    format: Option<Format>,
}

/// The answer of `GET /admin/api/history` as JSON.
#[derive(Serialize, utoipa::ToSchema)]
pub struct HistoryPage {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    step: HistoryStep,
    /// In order of time, source, item, policy, rule and outcome; rows of 0 left out.
    rows: Vec<HistoryRow>,
}

const HISTORY_HEADER: &str = "at,source,item,policy,rule,outcome,count\n";

fn history_line(row: &HistoryRow) -> String {
    format!(
        "{},{},{},{},{},{},{}\n",
        row.at.to_rfc3339(),
        row.source,
        row.item.map(|i| i.to_string()).unwrap_or_default(),
        text(row.policy.as_deref().unwrap_or_default()),
        text(row.rule.as_deref().unwrap_or_default()),
        text(&row.outcome),
        row.count,
    )
}

/// `GET /admin/api/history?item=&policy=&from=&to=&step=minute|hour`: the per-minute
/// rows of the purchases, the limiter's decisions and the waiting rooms.
#[utoipa::path(get, path = "/admin/api/history", operation_id = "getHistory", tag = "admin", params(HistoryParams),
    responses(
        (status = 200, description = "The rows, as JSON, or as CSV with a header row (`format=csv` or `Accept: text/csv`), streamed",
            content((HistoryPage = "application/json"), (String = "text/csv"))),
        (status = 400, description = "`VALIDATION_FAILED`: `field` names the query parameter; `to` past `history.max_range_days` or `history.max_rows`", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn history(
    _admin: Admin,
    request: HttpRequest,
    params: QueryParams<HistoryParams>,
    pool: web::Data<PgPool>,
    settings: web::Data<HistorySettings>,
) -> Result<HttpResponse, ApiError> {
    let params = params.into_inner();
    let query = query_of(
        (params.from, params.to),
        params.step.unwrap_or_default(),
        params.item,
        params.policy,
        &settings,
    )?;
    rows::check_rows(&pool, &query, &settings)
        .await?
        .map_err(refused)?;
    if format_of(params.format, &request) == Format::Json {
        let rows = rows::page(&pool, &query, None, settings.max_rows as i64).await?;
        return Ok(HttpResponse::Ok().json(HistoryPage {
            from: query.from,
            to: query.to,
            step: query.step,
            rows,
        }));
    }
    Ok(streamed(
        "history.csv",
        HISTORY_HEADER.to_string(),
        None,
        move |after: Option<Cursor>| {
            let (pool, query) = (pool.clone(), query.clone());
            async move {
                let rows = rows::page(&pool, &query, after.as_ref(), BATCH).await?;
                let chunk: String = rows.iter().map(history_line).collect();
                let next = rows.last().map(HistoryRow::cursor);
                let more = rows.len() as i64 == BATCH;
                Ok((chunk, more.then_some(next)))
            }
        },
    ))
}

/// The query of `GET /admin/api/history/samples`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SamplesParams {
    /// Only this item's refusals.
    item: Option<i64>,
    /// Only this policy's refusals.
    policy: Option<String>,
    /// RFC 3339, included; a day before `to` when absent.
    from: Option<DateTime<Utc>>,
    /// RFC 3339, excluded; now when absent. At most `history.max_range_days` after `from`.
    to: Option<DateTime<Utc>>,
}

/// The answer of `GET /admin/api/history/samples`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SamplesPage {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    /// Oldest first, at most `history.max_rows`.
    samples: Vec<SampledRefusal>,
    /// More samples fall in the range than the answer holds: narrow it.
    truncated: bool,
}

/// `GET /admin/api/history/samples?item=&policy=&from=&to=`: the sampled refusals, each
/// with its user, address, policy and rule. Personal data, kept
/// `history.sample_retention_days`; this is their only reader.
#[utoipa::path(get, path = "/admin/api/history/samples", operation_id = "getRefusalSamples", tag = "admin", params(SamplesParams),
    responses(
        (status = 200, description = "The samples, oldest first", body = SamplesPage),
        (status = 400, description = "`VALIDATION_FAILED`: `field` names the query parameter; `to` past `history.max_range_days`", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn refusal_samples(
    _admin: Admin,
    params: QueryParams<SamplesParams>,
    pool: web::Data<PgPool>,
    settings: web::Data<HistorySettings>,
) -> Result<HttpResponse, ApiError> {
    let params = params.into_inner();
    let query = query_of(
        (params.from, params.to),
        HistoryStep::Minute,
        params.item,
        params.policy,
        &settings,
    )?;
    let limit = settings.max_rows as i64;
    let mut found = samples::between(&pool, &query, limit + 1).await?;
    let truncated = found.len() as i64 > limit;
    found.truncate(settings.max_rows);
    Ok(HttpResponse::Ok().json(SamplesPage {
        from: query.from,
        to: query.to,
        samples: found,
        truncated,
    }))
}

/// The query of `GET /admin/api/items/{id}/report`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReportParams {
    /// `json` (the default) or `csv` (the minute-by-minute table); without it, CSV when
    /// `Accept` names `text/csv`.
    #[param(inline)]
    format: Option<Format>,
}

/// The minute-by-minute table's CSV: a `refused_<dimension>` column per dimension.
fn report_csv(report: &SaleReport) -> (String, String) {
    let mut header = "minute,attempts,admitted,sold,errors".to_string();
    for dimension in report.dimensions() {
        header.push(',');
        header.push_str(&text(&format!("refused_{dimension}")));
    }
    header.push('\n');
    let mut body = String::new();
    for minute in &report.minutes {
        body.push_str(&format!(
            "{},{},{},{},{}",
            minute.minute.to_rfc3339(),
            minute.attempts,
            minute.admitted,
            minute.sold,
            minute.errors
        ));
        for dimension in report.dimensions() {
            let refused = minute.refused.get(dimension).copied().unwrap_or(0);
            body.push_str(&format!(",{refused}"));
        }
        body.push('\n');
    }
    (header, body)
}

/// `GET /admin/api/items/{id}/report`: one sale, past or live, after the fact.
#[utoipa::path(get, path = "/admin/api/items/{id}/report", operation_id = "getItemReport", tag = "admin",
    params(("id" = i64, Path, description = "The item"), ReportParams),
    responses(
        (status = 200, description = "The sale's figures and its minutes, as JSON; `format=csv`: the minute-by-minute table",
            content((SaleReport = "application/json"), (String = "text/csv"))),
        (status = 400, description = "`VALIDATION_FAILED`: `field` names the query parameter", body = crate::http::api_error::ErrorBody),
        (status = 404, description = "`ITEM_NOT_FOUND`", body = crate::http::api_error::ErrorBody),
    ))]
pub async fn item_report(
    _admin: Admin,
    request: HttpRequest,
    id: web::Path<i64>,
    params: QueryParams<ReportParams>,
    pool: web::Data<PgPool>,
    items: web::Data<Items>,
    settings: web::Data<HistorySettings>,
) -> Result<HttpResponse, ApiError> {
    let id = item_id(id.into_inner())?;
    let report = sale_report(&pool, &items, id, &settings)
        .await?
        .ok_or(SaleError::ItemNotFound)?;
    if format_of(params.format, &request) == Format::Json {
        return Ok(HttpResponse::Ok().json(report));
    }
    let (header, body) = report_csv(&report);
    Ok(streamed(
        &format!("item-{}-report.csv", id.get()),
        header,
        body,
        |body| async move { Ok((body, None)) },
    ))
}
