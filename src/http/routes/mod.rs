//! Thin HTTP handlers, one file per area. They parse input into domain types, call the
//! domain, and turn its answer into a response; no business rule lives here.

pub mod admin;
pub mod health;
pub mod items;
pub mod limited;
pub mod metrics;
pub mod seckill;
pub mod session;

use actix_web::web;

use crate::configuration::policies::LIMITED_POLICY;
use crate::http::auth::require_admin;
use crate::http::fallback::resource;
use crate::http::rate_limit::RateLimit;

/// Which optional routes exist in this deployment.
#[derive(Debug, Clone)]
pub struct RouteOptions {
    pub dev_login: bool,
    /// The shopper page and the admin dashboard (`static/`), served at `/`.
    pub static_dir: std::path::PathBuf,
}

pub fn configure(cfg: &mut web::ServiceConfig, options: RouteOptions) {
    cfg.service(resource("/health/live").route(web::get().to(health::live)))
        .service(resource("/health/ready").route(web::get().to(health::ready)))
        .service(resource("/metrics").route(web::get().to(metrics::metrics)))
        .service(resource("/api/me").route(web::get().to(session::me)))
        .service(resource("/api/items").route(web::get().to(items::list)))
        .service(resource("/api/orders/mine").route(web::get().to(seckill::my_orders)))
        .service(resource("/seckill").route(web::post().to(seckill::purchase)))
        .service(
            web::scope("/admin/api")
                .wrap(actix_web::middleware::from_fn(require_admin))
                .service(resource("/me").route(web::get().to(admin::me)))
                .service(resource("/items").route(web::post().to(admin::create_item)))
                .service(resource("/items/{id}/pause").route(web::post().to(admin::pause)))
                .service(resource("/items/{id}/resume").route(web::post().to(admin::resume)))
                .service(resource("/orders").route(web::get().to(admin::orders)))
                .service(resource("/stats").route(web::get().to(admin::stats)))
                .service(resource("/policies").route(web::get().to(admin::policies)))
                .service(
                    resource("/policies/{name}")
                        .route(web::get().to(admin::policy))
                        .route(web::put().to(admin::update_policy)),
                )
                .service(resource("/audit").route(web::get().to(admin::audit)))
                .default_service(web::to(crate::http::fallback::not_found)),
        )
        .service(
            resource("/api/limited")
                .wrap(RateLimit::policy(LIMITED_POLICY).algorithm_from_query("policy"))
                .route(web::get().to(limited::limited)),
        );
    if options.dev_login {
        cfg.service(resource("/api/session").route(web::post().to(session::create)));
    }
    // Last, so every API route wins. Only files that exist are served (no listings, no
    // hidden files, no `..`); anything else gets the JSON 404.
    cfg.service(
        actix_files::Files::new("/", &options.static_dir)
            .guard(actix_web::guard::Any(actix_web::guard::Get()).or(actix_web::guard::Head()))
            .index_file("index.html")
            .default_handler(web::to(crate::http::fallback::not_found)),
    );
}
