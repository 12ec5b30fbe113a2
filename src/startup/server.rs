//! The actix server: middleware, shared state, routes.

use std::net::TcpListener;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::{web, App, HttpServer};
use tracing_actix_web::TracingLogger;

use super::services::Services;
use crate::configuration::Settings;
use crate::http::client_ip::TrustedProxies;
use crate::http::request_span::RequestSpan;
use crate::http::routes::health::ReadinessTimeout;
use crate::http::routes::openapi::OpenApiJson;
use crate::http::routes::{self, RouteOptions};

/// Starts serving on `listener` (the server runs once awaited).
pub(super) fn start(
    settings: &Settings,
    services: Services,
    listener: TcpListener,
) -> anyhow::Result<Server> {
    // Shared state is built once, here, and cloned (an Arc bump) into each worker.
    let Services {
        pool,
        redis,
        keys,
        metrics,
        limiter,
        rules,
        sale,
        idempotency,
        admin_guard,
        stats,
    } = services;
    let pool = web::Data::new(pool);
    let redis = web::Data::new(redis);
    let keys = web::Data::new(keys);
    let metrics = web::Data::from(metrics);
    let limiter = web::Data::from(limiter);
    let sale = web::Data::from(sale);
    let idempotency = web::Data::new(idempotency);
    let admin_guard = web::Data::new(admin_guard);
    let rules = web::Data::from(rules);
    let stats = web::Data::from(stats);
    let proxies = web::Data::new(TrustedProxies::new(settings.trusted_proxies.clone()));
    let readiness = web::Data::new(ReadinessTimeout(settings.readiness_timeout()));
    let body_timeout = web::Data::new(crate::http::json::BodyTimeout(Duration::from_millis(
        settings.body_timeout_ms,
    )));
    let options = RouteOptions {
        dev_login: settings.dev_login_enabled(),
        static_dir: settings.static_dir.clone().into(),
    };
    let openapi = web::Data::new(OpenApiJson(
        crate::http::openapi::document(options.dev_login)
            .to_json()?
            .into(),
    ));

    // The request span exists only at `debug` (see `http::request_span`); below that
    // the middleware is left out altogether, request id and all.
    let request_spans = tracing::level_filters::LevelFilter::current() >= tracing::Level::DEBUG;
    let mut server = HttpServer::new(move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(
                crate::http::request_metrics::record,
            ))
            .wrap(security_headers())
            .wrap(actix_web::middleware::Condition::new(
                request_spans,
                TracingLogger::<RequestSpan>::new(),
            ))
            .app_data(pool.clone())
            .app_data(redis.clone())
            .app_data(keys.clone())
            .app_data(readiness.clone())
            .app_data(body_timeout.clone())
            .app_data(metrics.clone())
            .app_data(limiter.clone())
            .app_data(proxies.clone())
            .app_data(sale.clone())
            .app_data(idempotency.clone())
            .app_data(admin_guard.clone())
            .app_data(rules.clone())
            .app_data(stats.clone())
            .app_data(openapi.clone())
            .app_data(crate::http::fallback::query_config())
            .app_data(crate::http::fallback::path_config())
            .configure(|cfg| {
                routes::configure(cfg, options.clone());
            })
            .default_service(web::to(crate::http::fallback::not_found))
    })
    .max_connections(settings.max_connections.max(1))
    .listen(listener)?
    .shutdown_timeout(settings.shutdown_timeout_secs);
    if let Some(workers) = settings.workers {
        server = server.workers(workers);
    }
    Ok(server.run())
}

/// Headers for every answer. The pages hold bearer tokens, so the Content-Security-Policy
/// allows nothing but this origin's own scripts, styles and API: no inline script, no
/// CDN, no framing.
fn security_headers() -> actix_web::middleware::DefaultHeaders {
    actix_web::middleware::DefaultHeaders::new()
        .add((
            "Content-Security-Policy",
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ))
        .add(("X-Content-Type-Options", "nosniff"))
        .add(("Referrer-Policy", "no-referrer"))
        .add(("X-Frame-Options", "DENY"))
}
