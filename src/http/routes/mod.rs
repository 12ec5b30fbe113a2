//! Thin HTTP handlers, one file per area. They parse input into domain types, call the
//! domain, and turn its answer into a response; no business rule lives here.
//!
//! [`configure`] is the router, and it returns what it served: each operation goes
//! through `Served::resource`, which registers it with actix and records its method
//! and path, so a test can hold the router against the OpenAPI document
//! ([`crate::http::openapi`]) in both directions.

pub mod admin;
pub mod health;
pub mod items;
pub mod limited;
pub mod metrics;
pub mod openapi;
pub mod orders;
pub mod queue;
pub mod seckill;
pub mod session;

use actix_web::http::Method;
use actix_web::{web, FromRequest, Handler, Resource, Responder, Route};

use crate::configuration::policies::LIMITED_POLICY;
use crate::http::auth::require_admin;
use crate::http::fallback::resource;
use crate::http::rate_limit::RateLimit;

/// Which optional routes exist in this deployment.
#[derive(Debug, Clone)]
pub struct RouteOptions {
    /// Whether `POST /api/session` is served (see `Settings::dev_login`).
    pub dev_login: bool,
    /// The shopper page and the admin dashboard (`static/`), served at `/`.
    pub static_dir: std::path::PathBuf,
}

/// One operation the router serves: `GET /api/items`, with actix's `{param}` spelling,
/// which is also OpenAPI's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Operation {
    /// The HTTP method, upper-case.
    pub method: String,
    /// The path pattern, with `{param}`s.
    pub path: String,
}

/// Registers the API's routes and the static pages; returns the API's operations (the
/// static pages are files, not operations, and are not in the OpenAPI document).
pub fn configure(cfg: &mut web::ServiceConfig, options: RouteOptions) -> Vec<Operation> {
    let mut served = Served::under("");
    cfg.service(served.resource("/health/live", [get(health::live)]))
        .service(served.resource("/health/ready", [get(health::ready)]))
        .service(served.resource("/metrics", [get(metrics::metrics)]))
        .service(served.resource("/api/openapi.json", [get(openapi::document)]))
        .service(served.resource("/api/me", [get(session::me)]))
        .service(served.resource("/api/items", [get(items::list)]))
        .service(served.resource("/api/orders/mine", [get(orders::my_orders)]))
        .service(served.resource(
            "/api/items/{id}/queue",
            [get(queue::poll), post(queue::join)],
        ))
        .service(served.resource("/seckill", [post(seckill::purchase)]))
        .service(served.resource("/api/orders/{id}/pay", [post(orders::pay)]))
        .service(served.resource("/api/orders/{id}/cancel", [post(orders::cancel)]))
        .service(
            served
                .resource("/api/limited", [get(limited::limited)])
                .wrap(RateLimit::policy(LIMITED_POLICY).algorithm_from_query("policy")),
        );
    if options.dev_login {
        cfg.service(served.resource("/api/session", [post(session::create)]));
    }
    let mut operator = Served::under("/admin/api");
    cfg.service(
        web::scope("/admin/api")
            .wrap(actix_web::middleware::from_fn(require_admin))
            .service(operator.resource("/me", [get(admin::me)]))
            .service(
                operator.resource("/items", [get(admin::list_items), post(admin::create_item)]),
            )
            .service(operator.resource("/items/{id}", [patch(admin::edit_item)]))
            .service(operator.resource("/items/{id}/end", [post(admin::end_item)]))
            .service(operator.resource("/items/{id}/archive", [post(admin::archive_item)]))
            .service(operator.resource("/items/{id}/audit", [get(admin::item_audit)]))
            .service(operator.resource("/items/{id}/report", [get(admin::item_report)]))
            .service(operator.resource("/items/{id}/pause", [post(admin::pause)]))
            .service(operator.resource("/items/{id}/resume", [post(admin::resume)]))
            .service(operator.resource(
                "/items/{id}/waiting-room",
                [get(admin::waiting_room), put(admin::update_waiting_room)],
            ))
            .service(operator.resource("/orders", [get(admin::orders)]))
            .service(operator.resource("/orders.csv", [get(admin::orders_csv)]))
            .service(operator.resource("/history", [get(admin::history)]))
            .service(operator.resource("/history/samples", [get(admin::refusal_samples)]))
            .service(operator.resource("/stats", [get(admin::stats)]))
            .service(operator.resource("/stats/series", [get(admin::stats_series)]))
            .service(operator.resource("/policies", [get(admin::policies)]))
            .service(operator.resource(
                "/policies/{name}",
                [get(admin::policy), put(admin::update_policy)],
            ))
            .service(operator.resource("/audit", [get(admin::audit)]))
            .service(operator.resource("/rls/domains", [get(admin::list_domains)]))
            .service(operator.resource(
                "/rls/domains/{domain}",
                [
                    get(admin::domain),
                    put(admin::put_domain),
                    delete(admin::delete_domain),
                ],
            ))
            .service(operator.resource("/offenders", [get(admin::offenders)]))
            .service(operator.resource(
                "/blocks",
                [get(admin::list_blocks), post(admin::create_block)],
            ))
            .service(operator.resource("/blocks/{kind}/{value}", [delete(admin::delete_block)]))
            .default_service(web::to(crate::http::fallback::not_found)),
    );
    // Last, so every API route wins. Only files that exist are served (no listings, no
    // hidden files, no `..`); anything else gets the JSON 404, and the file service's
    // own refusals our envelope (`fallback::static_errors`).
    cfg.service(
        web::scope("")
            .wrap(actix_web::middleware::from_fn(
                crate::http::fallback::static_errors,
            ))
            .service(
                actix_files::Files::new("/", &options.static_dir)
                    .guard(
                        actix_web::guard::Any(actix_web::guard::Get()).or(actix_web::guard::Head()),
                    )
                    .index_file("index.html")
                    .default_handler(web::to(crate::http::fallback::not_found)),
            ),
    );
    served.operations.append(&mut operator.operations);
    served.operations
}

/// The probe listener's routes: liveness, readiness and the metrics, the same handlers
/// as the service's own.
pub fn configure_probes(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/health/live").route(web::get().to(health::live)))
        .service(resource("/health/ready").route(web::get().to(health::ready)))
        .service(resource("/metrics").route(web::get().to(metrics::metrics)));
}

/// Builds resources under one path prefix and remembers their operations.
struct Served {
    prefix: &'static str,
    operations: Vec<Operation>,
}

impl Served {
    fn under(prefix: &'static str) -> Self {
        Self {
            prefix,
            operations: Vec::new(),
        }
    }

    /// A resource with our JSON 404/405 fallbacks ([`resource`]) and these routes.
    fn resource<const N: usize>(&mut self, path: &str, routes: [(Method, Route); N]) -> Resource {
        routes
            .into_iter()
            .fold(resource(path), |resource, (method, route)| {
                self.operations.push(Operation {
                    method: method.as_str().to_ascii_lowercase(),
                    path: format!("{}{path}", self.prefix),
                });
                resource.route(route)
            })
    }
}

fn route<F, Args>(method: Method, handler: F) -> (Method, Route)
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    (method.clone(), web::method(method).to(handler))
}

fn get<F, Args>(handler: F) -> (Method, Route)
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    route(Method::GET, handler)
}

fn post<F, Args>(handler: F) -> (Method, Route)
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    route(Method::POST, handler)
}

fn patch<F, Args>(handler: F) -> (Method, Route)
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    route(Method::PATCH, handler)
}

fn put<F, Args>(handler: F) -> (Method, Route)
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    route(Method::PUT, handler)
}

fn delete<F, Args>(handler: F) -> (Method, Route)
where
    F: Handler<Args>,
    Args: FromRequest + 'static,
    F::Output: Responder + 'static,
{
    route(Method::DELETE, handler)
}
