//! The actix servers: the service itself (middleware, shared state, routes), the
//! probe listener (liveness, readiness, metrics) and, when `gate_port` is set, the NGINX
//! gate's decision endpoint (`http::gate`).
//!
//! Both are assembled from actix-server and actix-http rather than `HttpServer`, so that
//! every accepted connection passes the connection guard first
//! ([`crate::http::connections`]): a slot per client address, a deadline per request
//! head, a budget of connections waiting for one. The probe listener runs on a worker and a connection budget of its own, so the
//! platform's probes and Prometheus are answered even while the service's connections
//! are all taken.

use std::io;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_http::error::DispatchError;
use actix_http::{HttpService, Protocol};
use actix_server::Server;
use actix_service::{fn_service, map_config, IntoServiceFactory, ServiceFactoryExt};
use actix_web::body::MessageBody;
use actix_web::dev::{AppConfig, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{web, App};
use tokio::net::TcpStream;
use tracing_actix_web::TracingLogger;

use super::services::Services;
use crate::configuration::Settings;
use crate::http::connections::{AddressSlots, ConnectionLimits, Guarded};
use crate::http::forwarded::TrustedProxies;
use crate::http::head_budget::HeadBudget;
use crate::http::request_span::RequestSpan;
use crate::http::routes::health::ReadinessTimeout;
use crate::http::routes::openapi::OpenApiJson;
use crate::http::routes::{self, RouteOptions};
use crate::metrics::Metrics;

/// Connections the probe listener's one worker serves at once: probes and scrapes come
/// one or two at a time.
const PROBE_CONNECTIONS: usize = 64;

/// The servers, bound and ready to run.
pub(super) struct Servers {
    pub service: Server,
    pub probes: Server,
    /// The NGINX gate's, when `gate_port` is set.
    pub gate: Option<Server>,
}

/// The listeners the servers serve on.
pub(super) struct Listeners {
    pub service: TcpListener,
    pub probes: TcpListener,
    pub gate: Option<TcpListener>,
}

/// Starts serving the service, the probes and the gate on their listeners (the servers
/// run once awaited).
pub(super) fn start(
    settings: &Settings,
    services: Services,
    listeners: Listeners,
) -> anyhow::Result<Servers> {
    // Shared state is built once, here, and cloned (an Arc bump) into each worker.
    let Services {
        pool,
        redis,
        keys,
        metrics,
        limiter,
        rules,
        domains,
        edge,
        items,
        purchases,
        orders,
        idempotency,
        admin_guard,
        stats,
        waiting_room,
        poll_budget,
        sale: _,
        reservations: _,
        rooms: _,
        lobby: _,
        room_redis: _,
        blocks,
        blocklist,
    } = services;
    let waiting_room = web::Data::from(waiting_room);
    let poll_budget = web::Data::from(poll_budget);
    let pool = web::Data::new(pool);
    let redis = web::Data::new(redis);
    let keys = web::Data::new(keys);
    let metrics_data = web::Data::from(Arc::clone(&metrics));
    let limiter = web::Data::from(limiter);
    let items = web::Data::from(items);
    let purchases = web::Data::from(purchases);
    let orders = web::Data::from(orders);
    let idempotency = web::Data::new(idempotency);
    let admin_guard = web::Data::new(admin_guard);
    let rules = web::Data::from(rules);
    let domains = web::Data::from(domains);
    let stats = web::Data::from(stats);
    let history_settings = web::Data::new(settings.history.clone());
    let blocks = web::Data::from(blocks);
    let blocklist = web::Data::from(blocklist);
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
    let service = {
        let metrics = metrics_data.clone();
        let (pool, redis, readiness, purchases) = (
            pool.clone(),
            redis.clone(),
            readiness.clone(),
            purchases.clone(),
        );
        move || {
            App::new()
                .wrap(actix_web::middleware::from_fn(
                    crate::http::request_metrics::record,
                ))
                .wrap(security_headers())
                .wrap(actix_web::middleware::Condition::new(
                    request_spans,
                    TracingLogger::<RequestSpan>::new(),
                ))
                .wrap(actix_web::middleware::from_fn(
                    crate::http::connections::mark_heads,
                ))
                .app_data(pool.clone())
                .app_data(redis.clone())
                .app_data(keys.clone())
                .app_data(readiness.clone())
                .app_data(body_timeout.clone())
                .app_data(metrics.clone())
                .app_data(limiter.clone())
                .app_data(proxies.clone())
                .app_data(items.clone())
                .app_data(purchases.clone())
                .app_data(orders.clone())
                .app_data(idempotency.clone())
                .app_data(admin_guard.clone())
                .app_data(rules.clone())
                .app_data(domains.clone())
                .app_data(stats.clone())
                .app_data(history_settings.clone())
                .app_data(blocks.clone())
                .app_data(blocklist.clone())
                .app_data(waiting_room.clone())
                .app_data(poll_budget.clone())
                .app_data(openapi.clone())
                .app_data(crate::http::fallback::query_config())
                .app_data(crate::http::fallback::path_config())
                .configure(|cfg| {
                    routes::configure(cfg, options.clone());
                })
                .default_service(web::to(crate::http::fallback::not_found))
        }
    };
    let probes = move || {
        App::new()
            .wrap(security_headers())
            .wrap(actix_web::middleware::from_fn(
                crate::http::connections::mark_heads,
            ))
            .app_data(pool.clone())
            .app_data(redis.clone())
            .app_data(readiness.clone())
            .app_data(metrics_data.clone())
            .app_data(purchases.clone())
            .configure(routes::configure_probes)
            .default_service(web::to(crate::http::fallback::not_found))
    };

    let limits = ConnectionLimits {
        per_address: settings.max_connections_per_address.max(1),
        head_timeout: Duration::from_millis(settings.head_timeout_ms.max(1)),
        exempt: settings.trusted_proxies.clone(),
    };
    // Resolved here (not left to actix): the budget of waiting connections is per worker.
    let workers = settings.worker_threads();
    let max_connections = settings.max_connections.max(1);
    let builder = Server::build()
        .workers(workers)
        .max_concurrent_connections(max_connections)
        .shutdown_timeout(settings.shutdown_timeout_secs);
    let awaiting_head =
        awaiting_head_budget(settings.max_connections_awaiting_head, max_connections);
    let gate = listeners
        .gate
        .map(|listener| gate(settings, edge, listener, &limits, &metrics))
        .transpose()?;
    let service = serve(
        builder,
        listeners.service,
        service,
        limits.clone(),
        HeadBudget::new(awaiting_head * workers, Arc::clone(&metrics)),
        &metrics,
    )?;
    // Signals are the service's: the application stops the probes after it (see
    // `Application::run_until_stopped`), so they answer for as long as the service does.
    let probe_builder = Server::build()
        .disable_signals()
        .workers(1)
        .max_concurrent_connections(PROBE_CONNECTIONS)
        .shutdown_timeout(settings.shutdown_timeout_secs);
    let probe_budget = HeadBudget::new(
        awaiting_head_budget(PROBE_CONNECTIONS * 7 / 8, PROBE_CONNECTIONS),
        Arc::clone(&metrics),
    );
    let probes = serve(
        probe_builder,
        listeners.probes,
        probes,
        limits,
        probe_budget,
        &metrics,
    )?;
    Ok(Servers {
        service,
        probes,
        gate,
    })
}

/// The NGINX gate's server: its one route on as many workers as the service (every
/// request NGINX gates is a decision here). Only NGINX connects, so its connections
/// are not shared out per address; the head deadline and the budget of connections
/// waiting for one hold as on the service.
fn gate(
    settings: &Settings,
    edge: Arc<crate::edge::Edge>,
    listener: TcpListener,
    limits: &ConnectionLimits,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Server> {
    let edge = web::Data::from(edge);
    let secret = web::Data::new(crate::http::gate::GateSecret::new(
        settings.gate_secret.clone(),
    ));
    let app = move || {
        App::new()
            .wrap(actix_web::middleware::from_fn(
                crate::http::connections::mark_heads,
            ))
            .app_data(edge.clone())
            .app_data(secret.clone())
            .configure(crate::http::gate::configure)
            .default_service(web::to(crate::http::fallback::not_found))
    };
    let workers = settings.worker_threads();
    let max_connections = settings.max_connections.max(1);
    let builder = Server::build()
        .disable_signals()
        .workers(workers)
        .max_concurrent_connections(max_connections)
        .shutdown_timeout(settings.shutdown_timeout_secs);
    let budget = HeadBudget::new(
        awaiting_head_budget(settings.max_connections_awaiting_head, max_connections) * workers,
        Arc::clone(metrics),
    );
    let limits = ConnectionLimits {
        per_address: u32::try_from(max_connections * workers).unwrap_or(u32::MAX),
        ..limits.clone()
    };
    serve(builder, listener, app, limits, budget, metrics)
}

/// A worker's budget of connections waiting for a head: `wanted`, at least 1. Below the
/// worker's places (`max_connections`), the worker always has a place for a newcomer,
/// which is the point of the budget; equal to them, waiting connections can fill the
/// worker as before the budget (`tests/api/connections.rs` holds it so). Above them (a
/// cap lowered, the budget left at its default), 7/8 of them, the default's share.
fn awaiting_head_budget(wanted: usize, max_connections: usize) -> usize {
    if wanted > max_connections {
        max_connections * 7 / 8
    } else {
        wanted
    }
    .max(1)
}

/// `app` on `listener`, every connection through the guard: refused when its address
/// holds its share, its stream under the head deadline and in `budget` while it waits
/// for a head.
fn serve<F, A, B>(
    builder: actix_server::ServerBuilder,
    listener: TcpListener,
    app: F,
    limits: ConnectionLimits,
    budget: Arc<HeadBudget>,
    metrics: &Arc<Metrics>,
) -> anyhow::Result<Server>
where
    F: Fn() -> App<A> + Send + Clone + 'static,
    A: ServiceFactory<
            ServiceRequest,
            Config = (),
            Response = ServiceResponse<B>,
            Error = actix_web::Error,
            InitError = (),
        > + 'static,
    B: MessageBody + 'static,
{
    let addr = listener.local_addr()?;
    let head_timeout = limits.head_timeout;
    let slots = AddressSlots::new(limits, Arc::clone(metrics));
    let shutdown = builder.graceful_shutdown_signal();
    let builder = builder.listen(format!("seckill-{addr}"), listener, move || {
        let (slots, budget) = (Arc::clone(&slots), Arc::clone(&budget));
        let shutdown = shutdown.clone();
        let accept = fn_service(move |stream: TcpStream| {
            let (slots, budget) = (Arc::clone(&slots), Arc::clone(&budget));
            async move {
                let _ = stream.set_nodelay(true);
                let peer = stream.peer_addr().ok();
                let slot = slots.admit(peer).ok_or_else(|| {
                    DispatchError::Io(io::Error::new(
                        io::ErrorKind::ConnectionRefused,
                        "the client address holds its share of connections",
                    ))
                })?;
                Ok((
                    Guarded::new(stream, slot, slots, &budget),
                    Protocol::Http1,
                    peer,
                ))
            }
        });
        let app = app()
            .into_factory()
            .map_err(|e: actix_web::Error| e.error_response());
        let http = HttpService::build()
            .graceful_shutdown_signal(move || {
                let signal = shutdown.clone();
                async move { signal.notified().await }
            })
            // The guard's deadline is the one that counts (and is counted); actix's own,
            // for a connection's first request, stays behind it as a backstop.
            .client_request_timeout(head_timeout + Duration::from_secs(1))
            .local_addr(addr)
            .on_connect_ext(|io: &Guarded<TcpStream>, data| {
                data.insert(io.clock());
            })
            .finish(map_config(app, |_| AppConfig::default()));
        accept.and_then(http)
    })?;
    Ok(builder.run())
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
