//! The request span, created only when it will be used.
//!
//! `tracing-actix-web`'s default root span is an INFO span with about fifteen fields,
//! and building it reads the route, the connection info and the user agent; the fmt
//! layer then formats every field when the span opens, for every request, even when no
//! line of that request is ever written. On the refusal path that was measured at a
//! third of the app's CPU. So the request span is a DEBUG span: at the default `info`
//! level `startup` leaves the middleware out (and this builder returns a disabled span
//! should a filter enable it only elsewhere), and with `debug` on every request gets
//! the full span with its request id. Failures a request causes are logged at the edge
//! (`ApiError`) whatever the level.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use tracing::{Level, Span};
use tracing_actix_web::{DefaultRootSpanBuilder, RootSpanBuilder};

pub struct RequestSpan;

impl RootSpanBuilder for RequestSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        if tracing::enabled!(Level::DEBUG) {
            tracing_actix_web::root_span!(level = Level::DEBUG, request)
        } else {
            Span::none()
        }
    }

    fn on_request_end<B: MessageBody>(
        span: Span,
        outcome: &Result<ServiceResponse<B>, actix_web::Error>,
    ) {
        DefaultRootSpanBuilder::on_request_end(span, outcome);
    }
}
