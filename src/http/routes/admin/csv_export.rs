//! The admin API's CSV: a text field made safe for a spreadsheet, and a body streamed a
//! batch at a time (bounded memory whatever the count; no Postgres connection held
//! between batches). The orders' export and the history's use both.

use std::future::Future;

use actix_web::web::Bytes;
use actix_web::HttpResponse;
use futures_util::stream;

/// A text field for a spreadsheet: quoted when it holds a comma, a quote or a line
/// break, and never read as a formula (a leading `=`, `+`, `-`, `@` gets a `'`).
pub(super) fn text(field: &str) -> String {
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

/// Where the body stands between batches.
enum Body<C> {
    Header(C),
    After(C),
    Done,
}

/// A 200 with `header` and then each batch `next` answers, as CSV, downloaded as
/// `filename`. `next(cursor)` answers a batch's rows and the cursor of the next batch
/// (`None` after the last); it starts from `start`.
pub(super) fn streamed<C, F, Fut>(
    filename: &str,
    header: String,
    start: C,
    mut next: F,
) -> HttpResponse
where
    C: 'static,
    F: FnMut(C) -> Fut + 'static,
    Fut: Future<Output = anyhow::Result<(String, Option<C>)>> + 'static,
{
    let mut header = Some(header);
    let body = stream::unfold(Body::Header(start), move |state| {
        let step = match state {
            Body::Header(start) => Ok((header.take().unwrap_or_default(), Some(start))),
            Body::After(cursor) => Err(next(cursor)),
            Body::Done => return futures_util::future::Either::Left(async { None }),
        };
        futures_util::future::Either::Right(async move {
            let batch = match step {
                Ok(header) => Ok(header),
                Err(batch) => batch.await,
            };
            match batch {
                Ok((chunk, cursor)) => {
                    let state = cursor.map_or(Body::Done, Body::After);
                    Some((Ok(Bytes::from(chunk)), state))
                }
                Err(e) => {
                    // The status is sent already: cutting the body short is all that is
                    // left, and the client sees an incomplete download.
                    tracing::error!(error = %format!("{e:#}"), "csv export failed");
                    Some((
                        Err(actix_web::error::ErrorInternalServerError("export failed")),
                        Body::Done,
                    ))
                }
            }
        })
    });
    HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{filename}\""),
        ))
        .streaming(body)
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
