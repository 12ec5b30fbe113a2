//! What the handlers and the background tasks share, built once from the settings:
//! the stores, the limiter with the rules from Postgres, the sale's parts and its
//! items, purchases and orders (warmed up), the idempotency store, the admin guard and
//! the live stats.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;

use crate::configuration::Settings;
use crate::edge::key_registry::KeyRegistry;
use crate::edge::{domain_files, DomainStore, Edge};
use crate::history::blocks::{BlockLimits, BlockStore};
use crate::http::idempotency::{Idempotency, IdempotencyLimits};
use crate::identity::lockout::SignInLockout;
use crate::identity::{AdminGuard, AdminTokens, QueueTokens, TokenKeys, TokenRules};
use crate::limiter::blocklist::Blocklist;
use crate::limiter::{Clock, Limiter};
use crate::metrics::Metrics;
use crate::rules::RuleStore;
use crate::sale::catalog::Catalog;
use crate::sale::committer::Batching;
use crate::sale::item::NewItem;
use crate::sale::overload::breaker::BreakerSettings;
use crate::sale::overload::gradient::GradientSettings;
use crate::sale::overload::{Overload, OverloadSettings};
use crate::sale::room::{Lobby, PollBudget, PollLimits, RoomRedis, Rooms, WaitingRoom};
use crate::sale::sold_out::SoldOut;
use crate::sale::stock::{KeyLifetime, ReservationOptions, StockRedis};
use crate::sale::{CommitOptions, Items, Orders, PurchaseOptions, Purchases, SaleParts};
use crate::stats::LiveStats;
use crate::store::postgres_pool::{self, PostgresOptions};
use crate::store::redis_store::RedisOptions;
use crate::store::RedisStore;

pub(super) struct Services {
    pub pool: PgPool,
    pub redis: RedisStore,
    pub keys: TokenKeys,
    pub metrics: Arc<Metrics>,
    pub limiter: Arc<Limiter>,
    pub rules: Arc<RuleStore>,
    /// The edge limiter's domains, and this instance's copy of them.
    pub domains: Arc<DomainStore>,
    /// The edge's engine over those domains: what the gRPC server and the NGINX gate ask.
    pub edge: Arc<Edge>,
    /// The parts every piece of the sale shares (the background tasks build theirs).
    pub sale: SaleParts,
    pub items: Arc<Items>,
    pub purchases: Arc<Purchases>,
    pub orders: Arc<Orders>,
    pub reservations: ReservationOptions,
    pub idempotency: Idempotency,
    pub admin_guard: AdminGuard,
    pub stats: Arc<LiveStats>,
    /// The waiting rooms: their settings, this instance's copies, their Redis side,
    /// and what the handlers call.
    pub rooms: Arc<Rooms>,
    pub lobby: Arc<Lobby>,
    pub room_redis: Arc<RoomRedis>,
    pub waiting_room: Arc<WaitingRoom>,
    pub poll_budget: Arc<PollBudget>,
    /// The operator's blocks: stored, announced, and this instance's table of them.
    pub blocks: Arc<BlockStore>,
    pub blocklist: Arc<Blocklist>,
}

impl Services {
    /// Connects, migrates, loads the rules and the items.
    pub async fn build(settings: &Settings) -> anyhow::Result<Self> {
        let commit_timeout = Duration::from_millis(settings.order_commit_timeout_ms);
        let postgres_options = postgres_options(settings);
        let pool = postgres_pool::pool(
            &postgres_options,
            settings.database_max_connections,
            settings.database_acquire_timeout(),
        )?;
        postgres_pool::migrate(&pool).await?;
        let metrics = Arc::new(Metrics::new()?);
        metrics.serving(&settings.commit);
        let history = &settings.history;
        metrics.tally.refusals.configure(
            history.sample_every,
            history.samples_per_second,
            history.sketch_capacity,
        );
        let redis = RedisStore::connect(&redis_options(settings), Arc::clone(&metrics)).await?;
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
        // The files seed the domains Postgres lacks; from then on Postgres is the truth.
        let domains = Arc::new(DomainStore::new(pool.clone(), redis.clone()));
        if let Some(dir) = settings
            .rls_config_dir
            .clone()
            .filter(|dir| !dir.is_empty())
        {
            let files = tokio::task::spawn_blocking(move || domain_files::read(dir.as_ref()))
                .await
                .context("reading rls_config_dir")??;
            domains
                .seed(&files)
                .await
                .context("seeding the edge domains")?;
        }
        domains.reload().await?;
        let edge = Arc::new(Edge::new(
            Arc::clone(&limiter),
            Arc::clone(&domains),
            KeyRegistry::new(redis.clone(), settings.rls_max_keys),
            Arc::clone(&metrics),
        ));
        let blocklist = Arc::new(Blocklist::new(Arc::clone(&metrics)));
        let blocks = Arc::new(BlockStore::new(
            pool.clone(),
            redis.clone(),
            Arc::clone(&limiter),
            Arc::clone(&blocklist),
            BlockLimits {
                max_secs: settings.history.block_max_secs,
                max_blocks: settings.history.blocks_max,
                guarded: settings.trusted_proxies.clone(),
            },
            Duration::from_millis(settings.history.block_poll_ms),
        ));
        // In force before the first request.
        blocks.reload().await.context("loading the blocks")?;
        let pay_within = Duration::from_secs(settings.payment_deadline_secs);
        let sale = SaleParts {
            pool: pool.clone(),
            redis: StockRedis::new(redis.clone()),
            lifetime: KeyLifetime::new(pay_within),
            catalog: Arc::new(Catalog::default()),
            sold_out: Arc::new(SoldOut::new(redis.clone(), Arc::clone(&metrics))),
            metrics: Arc::clone(&metrics),
            rebuy: settings.rebuy_after_release,
        };
        let reservations = ReservationOptions {
            pending: Duration::from_millis(settings.reservation_deadline_ms),
            replica_wait: Duration::from_millis(settings.reservation_replica_wait_ms),
        };
        let rooms = Arc::new(Rooms::new(pool.clone()));
        let items = Arc::new(Items::new(&sale, Arc::clone(&rooms)));
        let purchases = Arc::new(Purchases::new(
            &sale,
            PurchaseOptions {
                commit: CommitOptions {
                    connect: postgres_pool::connect_options(&postgres_options)?,
                    sessions_per_committer: settings.sessions_per_committer(),
                    batching: Batching {
                        max: settings.commit_batch_max,
                        linger: Duration::from_millis(settings.commit_linger_ms),
                    },
                },
                limiter: Arc::clone(&limiter),
                reservations,
                commit_timeout,
                pay_within,
                overload: Overload::new(overload_settings(settings), &metrics)
                    .context("invalid overload settings")?,
            },
        ));
        let orders = Arc::new(Orders::new(&sale));
        if settings.seed_demo_item {
            seed_demo_item(&pool, &items).await?;
        }
        items.warm_up().await.context("loading items and stock")?;
        rooms.reload().await.context("loading waiting rooms")?;
        let room_redis = Arc::new(RoomRedis::new(sale.redis.clone()));
        let lobby = Arc::new(Lobby::new(sale.clone(), Arc::clone(&room_redis)));
        let queue_tokens =
            Arc::new(QueueTokens::new(&settings.queue_secret).context("SECKILL_QUEUE_SECRET")?);
        let waiting_room = Arc::new(WaitingRoom::new(
            sale.clone(),
            Arc::clone(&rooms),
            Arc::clone(&lobby),
            Arc::clone(&room_redis),
            queue_tokens,
        ));
        let poll_budget = Arc::new(PollBudget::new(PollLimits {
            every_ms: settings.queue_poll_every_ms,
            burst: settings.queue_poll_burst,
            tickets: settings.queue_poll_tickets,
        }));
        let services = Self {
            blocks,
            blocklist,
            poll_budget,
            rooms,
            lobby,
            room_redis,
            waiting_room,
            keys: TokenKeys::new(&settings.jwt_secret, token_rules(settings))
                .context("SECKILL_JWT_SECRET")?,
            idempotency: Idempotency::new(
                redis.clone(),
                IdempotencyLimits {
                    answer_ttl: Duration::from_secs(settings.idempotency_ttl_secs),
                    claim_ttl: Duration::from_millis(settings.reservation_deadline_ms)
                        + commit_timeout,
                    stale_after: commit_timeout,
                    max_in_flight: settings.idempotency_max_in_flight,
                },
            ),
            admin_guard: AdminGuard::new(
                AdminTokens::parse(&settings.admin_token),
                Arc::clone(&limiter),
                SignInLockout::new(
                    redis.clone(),
                    Clock::from_source(settings.limiter.clock),
                    AdminGuard::ATTEMPT_LEASE,
                ),
                &metrics,
            ),
            stats: Arc::new(LiveStats::new(
                redis.clone(),
                Arc::clone(&metrics),
                Arc::clone(&limiter),
                &settings.history,
            )),
            pool,
            redis,
            metrics,
            limiter,
            rules,
            domains,
            edge,
            sale,
            items,
            purchases,
            orders,
            reservations,
        };
        Ok(services)
    }
}

/// What the Redis store needs from the settings.
pub fn redis_options(settings: &Settings) -> RedisOptions {
    RedisOptions {
        url: settings.redis_url.clone(),
        cluster_nodes: settings.redis_cluster_nodes(),
        sentinels: settings.redis_sentinels(),
        sentinel_master: settings.redis_sentinel_master.clone(),
        key_prefix: settings.redis_key_prefix.clone(),
        limiter_timeout: Duration::from_millis(settings.limiter.timeout_ms),
        timeout: Duration::from_millis(settings.redis_timeout_ms),
    }
}

/// What load shedding and the orders breaker need from the settings.
fn overload_settings(settings: &Settings) -> OverloadSettings {
    OverloadSettings {
        shedding: settings.shedding_enabled.then(|| GradientSettings {
            initial: settings.shedding_initial_limit,
            min: settings.shedding_min_limit,
            max: settings.shedding_max_limit,
            smoothing: settings.shedding_smoothing,
            tolerance: settings.shedding_tolerance,
            floor: Duration::from_millis(settings.shedding_latency_floor_ms),
            window: Duration::from_millis(settings.shedding_window_ms),
        }),
        breaker: BreakerSettings {
            failures: settings.orders_breaker_failures,
            open_for: Duration::from_millis(settings.orders_breaker_open_ms),
        },
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

/// Something to sell on a fresh local install: 100 units, on sale now for a day.
async fn seed_demo_item(pool: &sqlx::PgPool, items: &Items) -> anyhow::Result<()> {
    if crate::sale::records::item_count(pool).await? > 0 {
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
    items.create(demo, None, "seed").await?;
    Ok(())
}

/// What shopper tokens must be (see `identity::token`); an empty issuer or audience
/// setting means that claim is not asked for.
fn token_rules(settings: &Settings) -> TokenRules {
    let set = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
    TokenRules {
        ttl: Duration::from_secs(settings.token_ttl_secs),
        max_lifetime: Duration::from_secs(settings.token_max_lifetime_secs),
        issuer: set(&settings.token_issuer),
        audience: set(&settings.token_audience),
    }
}
