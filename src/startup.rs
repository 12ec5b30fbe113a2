//! Builds the application from settings: stores, shared state, routes, the listener.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::{web, App, HttpServer};
use anyhow::Context;
use futures_util::future::{BoxFuture, FutureExt};
use tracing_actix_web::TracingLogger;

use crate::admin::rules::{self, RuleStore};
use crate::admin::stats::LiveStats;
use crate::background;
use crate::configuration::Settings;
use crate::http::client_ip::TrustedProxies;
use crate::http::idempotency::{Idempotency, IdempotencyLimits};
use crate::http::request_span::RequestSpan;
use crate::http::routes::{self, health::ReadinessTimeout, RouteOptions};
use crate::identity::lockout::SignInLockout;
use crate::identity::{AdminGuard, AdminTokens, TokenKeys};
use crate::limiter::{Clock, Limiter};
use crate::metrics::Metrics;
use crate::sale::committer::{Batching, Committer};
use crate::sale::item::NewItem;
use crate::sale::redis::SaleRedis;
use crate::sale::Sale;
use crate::store::postgres::{self, PostgresOptions};
use crate::store::redis::RedisOptions;
use crate::store::RedisStore;

/// A bound, not yet running server. Tests build one on port 0 and read [`Self::port`].
pub struct Application {
    port: u16,
    server: Server,
    /// Loops that live exactly as long as the server (the catalog refresh): run beside
    /// it and dropped with it, so a stopped application holds no connection.
    background: BoxFuture<'static, ()>,
}

impl Application {
    /// Checks the settings, connects to the stores, applies migrations, loads the rules
    /// and the items, and binds the listener.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.check_production_safety()?;
        settings.check_timeouts()?;
        let commit_timeout = Duration::from_millis(settings.order_commit_timeout_ms);
        let postgres_options = postgres_options(&settings);
        let pool = postgres::pool(
            &postgres_options,
            settings.database_max_connections,
            settings.database_acquire_timeout(),
        )?;
        // Waiting for a commit connection is part of the commit's own time budget.
        let commit_pool = postgres::pool(
            &postgres_options,
            settings.database_commit_connections,
            commit_timeout,
        )?;
        postgres::migrate(&pool).await?;
        let metrics = Arc::new(Metrics::new()?);
        let redis = RedisStore::connect(&redis_options(&settings), Arc::clone(&metrics)).await?;
        let keys = TokenKeys::new(
            &settings.jwt_secret,
            Duration::from_secs(settings.token_ttl_secs),
        );
        let limiter = Arc::new(
            Limiter::new(redis.clone(), &settings.limiter, Arc::clone(&metrics))
                .context("invalid rate-limit policies")?,
        );
        // The settings seed the rules table; from then on Postgres is the truth.
        let rules = Arc::new(RuleStore::new(pool.clone(), redis.clone()));
        rules
            .seed(&settings.seed_policies())
            .await
            .context("seeding rate-limit rules")?;
        rules.apply(&limiter).await?;
        let sale_redis = SaleRedis::new(
            redis.clone(),
            Duration::from_millis(settings.reservation_deadline_ms),
        );
        // Room for two batches: more waiting than that would outlast the commit timeout.
        let (committer, commit_queue) = Committer::new(2 * settings.commit_batch_max);
        let sale = Arc::new(Sale::new(
            pool.clone(),
            commit_pool,
            committer,
            sale_redis,
            Arc::clone(&limiter),
            Arc::clone(&metrics),
            commit_timeout,
        ));
        let idempotency = Idempotency::new(
            redis.clone(),
            IdempotencyLimits {
                answer_ttl: Duration::from_secs(settings.idempotency_ttl_secs),
                claim_ttl: Duration::from_millis(settings.reservation_deadline_ms) + commit_timeout,
                stale_after: commit_timeout,
                max_in_flight: settings.idempotency_max_in_flight,
            },
        );
        if settings.seed_demo_item {
            seed_demo_item(&pool, &sale).await?;
        }
        sale.warm_up().await.context("loading items and stock")?;
        let stats = Arc::new(LiveStats::new(
            redis.clone(),
            Arc::clone(&metrics),
            Arc::clone(&limiter),
        ));
        let background = background_tasks(&settings, &sale, &rules, &limiter, &stats);
        let background = futures_util::future::join(
            background,
            Arc::clone(&sale).run_committer(
                commit_queue,
                Batching {
                    max: settings.commit_batch_max,
                    linger: Duration::from_millis(settings.commit_linger_ms),
                },
            ),
        )
        .map(drop)
        .boxed();
        let admin_guard = AdminGuard::new(
            AdminTokens::parse(&settings.admin_token),
            Arc::clone(&limiter),
            SignInLockout::new(
                redis.clone(),
                Clock::from_source(settings.limiter.clock),
                AdminGuard::ATTEMPT_LEASE,
            ),
            &metrics,
        );

        let listener = TcpListener::bind((settings.host.as_str(), settings.port))
            .with_context(|| format!("binding {}:{}", settings.host, settings.port))?;
        let port = listener.local_addr()?.port();
        tracing::info!(
            host = %settings.host, port, environment = ?settings.environment,
            dev_login = settings.dev_login_enabled(),
            admin_endpoints = settings.admin_endpoints_open(),
            "seckill listening"
        );

        // Shared state is built once, here, and cloned (an Arc bump) into each worker.
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
                .app_data(crate::http::fallback::query_config())
                .app_data(crate::http::fallback::path_config())
                .configure(|cfg| routes::configure(cfg, options.clone()))
                .default_service(web::to(crate::http::fallback::not_found))
        })
        .listen(listener)?
        .shutdown_timeout(settings.shutdown_timeout_secs);
        if let Some(workers) = settings.workers {
            server = server.workers(workers);
        }
        Ok(Self {
            port,
            server: server.run(),
            background,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server from elsewhere (tests); SIGTERM and Ctrl-C do the same in the binary.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until a shutdown signal, then drains in-flight requests
    /// (up to `shutdown_timeout_secs`).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        tokio::select! {
            stopped = self.server => stopped,
            () = self.background => Ok(()),
        }
    }
}

/// What the Redis store needs from the settings.
pub fn redis_options(settings: &Settings) -> RedisOptions {
    RedisOptions {
        url: settings.redis_url.clone(),
        key_prefix: settings.redis_key_prefix.clone(),
        limiter_timeout: Duration::from_millis(settings.limiter.timeout_ms),
        timeout: Duration::from_millis(settings.redis_timeout_ms),
    }
}

/// What the Postgres pools need from the settings.
fn postgres_options(settings: &Settings) -> PostgresOptions {
    PostgresOptions {
        url: settings.database_url.clone(),
        statement_timeout_ms: settings.database_statement_timeout_ms,
        idle_in_transaction_timeout_ms: settings.database_idle_in_transaction_timeout_ms,
    }
}

/// The loops that run beside the server, for as long as it runs: catalog and sold-out
/// refresh, the sold-out channel, the reconciler, the consistency export, the rule
/// watcher and the live-stats flush.
fn background_tasks(
    settings: &Settings,
    sale: &Arc<Sale>,
    rules: &Arc<RuleStore>,
    limiter: &Arc<Limiter>,
    stats: &Arc<LiveStats>,
) -> BoxFuture<'static, ()> {
    let listener = sale.sold_out().listen(settings.redis_url.clone());
    let reconciler = sale.reconciler().run(
        Duration::from_millis(settings.reconcile_interval_ms),
        uuid::Uuid::new_v4().to_string(),
    );
    let consistency = {
        let export = Arc::new(sale.consistency_export());
        let period = Duration::from_secs(settings.consistency_interval_secs.max(1));
        background::every("consistency export", period, move || {
            let export = Arc::clone(&export);
            async move { export.run().await }
        })
    };
    let loops: Vec<BoxFuture<'static, ()>> = vec![
        refresh(Arc::clone(sale)).boxed(),
        listener.boxed(),
        reconciler.boxed(),
        consistency.boxed(),
        rules::watch(
            Arc::clone(rules),
            Arc::clone(limiter),
            Duration::from_millis(500),
        )
        .boxed(),
        Arc::clone(stats).run().boxed(),
    ];
    futures_util::future::join_all(loops).map(drop).boxed()
}

/// Other instances create items and sell stock too: every second, reload the catalog
/// (their items become purchasable here) and re-read the stock counters (the safety net
/// under the sold-out channel).
async fn refresh(sale: Arc<Sale>) {
    background::every(
        "catalog and sold-out refresh",
        Duration::from_secs(1),
        || {
            let sale = Arc::clone(&sale);
            async move {
                sale.reload_catalog().await.context("catalog reload")?;
                sale.refresh_sold_out().await.context("sold-out check")
            }
        },
    )
    .await
}

/// Something to sell on a fresh local install: 100 units, on sale now for a day.
async fn seed_demo_item(pool: &sqlx::PgPool, sale: &Sale) -> anyhow::Result<()> {
    if crate::sale::postgres::item_count(pool).await? > 0 {
        return Ok(());
    }
    let now = chrono::Utc::now();
    let demo = NewItem::parse(
        "Demo flash-sale phone",
        99_900,
        100,
        now,
        now + chrono::Duration::days(1),
    )
    .map_err(|e| anyhow::anyhow!("demo item: {e}"))?;
    sale.create_item(demo).await?;
    Ok(())
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
