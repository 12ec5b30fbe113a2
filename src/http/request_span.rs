//! The request span, created only when it will be used.
//!
//! `tracing-actix-web`'s default root span is an INFO span with about fifteen fields,
//! and building it reads the route, the connection info and the user agent; the fmt
//! layer then formats every field when the span opens, for every request, even when no
//! line of that request is ever written. On the refusal path that was measured at a
//! third of the app's CPU. So the request span is a DEBUG span: at the default `info`
//! level `startup` leaves the middleware out (and this builder returns a disabled span
//! should a filter enable it only elsewhere), and with `debug` on every request gets a
//! span with its request id. Failures a request causes are logged at the edge
//! (`ApiError`) whatever the level. Its client address is ours (trusted-proxy aware,
//! what the limiter keys on), not `tracing-actix-web`'s, which believes
//! `X-Forwarded-For` from anyone.

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::{web, HttpMessage};
use tracing::field::Empty;
use tracing::{Level, Span};
use tracing_actix_web::{DefaultRootSpanBuilder, RequestId, RootSpanBuilder};

use super::forwarded::TrustedProxies;

/// The root span builder: a DEBUG span with the request id and our client address (see the
/// module docs).
pub struct RequestSpan;

impl RootSpanBuilder for RequestSpan {
    fn on_request_start(request: &ServiceRequest) -> Span {
        if !tracing::enabled!(Level::DEBUG) {
            return Span::none();
        }
        // Our own client address (X-Forwarded-For only from trusted proxies), the same
        // the limiter keys on: the stock span believes the header from anyone.
        let client_ip = request
            .app_data::<web::Data<TrustedProxies>>()
            .and_then(|proxies| proxies.client_ip(request.request()))
            .map(|ip| ip.to_string())
            .unwrap_or_default();
        let request_id = request
            .extensions()
            .get::<RequestId>()
            .map(|id| id.to_string())
            .unwrap_or_default();
        tracing::debug_span!(
            "HTTP request",
            http.method = %request.method(),
            http.route = %request.match_pattern().unwrap_or_default(),
            http.target = %request.uri().path(),
            http.client_ip = %client_ip,
            http.status_code = Empty,
            otel.status_code = Empty,
            exception.message = Empty,
            exception.details = Empty,
            request_id = %request_id,
        )
    }

    fn on_request_end<B: MessageBody>(
        span: Span,
        outcome: &Result<ServiceResponse<B>, actix_web::Error>,
    ) {
        DefaultRootSpanBuilder::on_request_end(span, outcome);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use actix_web::test::TestRequest;
    use actix_web::web;
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::Layer;

    use super::*;
    use crate::http::forwarded::TrustedProxies;

    /// Keeps the `http.client_ip` of every span opened on this thread.
    struct ClientIps(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> Layer<S> for ClientIps {
        fn on_new_span(
            &self,
            attrs: &tracing::span::Attributes<'_>,
            _: &tracing::span::Id,
            _: Context<'_, S>,
        ) {
            struct Find<'a>(&'a Mutex<Vec<String>>);
            impl Visit for Find<'_> {
                fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                    if field.name() == "http.client_ip" {
                        if let Ok(mut ips) = self.0.lock() {
                            ips.push(format!("{value:?}"));
                        }
                    }
                }
            }
            attrs.record(&mut Find(&self.0));
        }
    }

    /// The `http.client_ip` of the request span of one request through the middleware.
    async fn client_ip_in_span(peer: &str, forwarded_for: &str) -> Vec<String> {
        let ips = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(
            ClientIps(Arc::clone(&ips)).with_filter(tracing::level_filters::LevelFilter::DEBUG),
        );
        let _on_this_thread = tracing::subscriber::set_default(subscriber);
        let app = actix_web::test::init_service(
            actix_web::App::new()
                .wrap(tracing_actix_web::TracingLogger::<RequestSpan>::new())
                .app_data(web::Data::new(TrustedProxies::new(vec!["127.0.0.1"
                    .parse()
                    .unwrap()])))
                .route("/", web::get().to(actix_web::HttpResponse::Ok)),
        )
        .await;
        let request = TestRequest::get()
            .uri("/")
            .peer_addr(peer.parse().unwrap())
            .insert_header(("X-Forwarded-For", forwarded_for))
            .to_request();
        let response = actix_web::test::call_service(&app, request).await;
        assert!(response.status().is_success());
        let ips = ips.lock().unwrap().clone();
        ips
    }

    #[actix_web::test]
    async fn the_span_names_the_client_the_limiter_sees_not_a_forged_one() {
        assert_eq!(
            client_ip_in_span("127.0.0.2:5000", "6.6.6.6").await,
            ["127.0.0.2"]
        );
        assert_eq!(
            client_ip_in_span("127.0.0.1:5000", "6.6.6.6").await,
            ["6.6.6.6"]
        );
    }
}
