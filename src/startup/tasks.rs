//! The loops that run beside the server, for as long as it runs (see
//! [`crate::background`] for how a periodic one behaves and why stopping is dropping).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::future::{BoxFuture, FutureExt};

use super::services::Services;
use crate::background;
use crate::configuration::Settings;
use crate::history::{Fold, Retention};
use crate::rules;
use crate::sale::consistency::ConsistencyExport;
use crate::sale::room::{Inlet, Rooms};
use crate::sale::sold_out::SoldOut;
use crate::sale::{Items, Reconciler, Sweeper};

/// The catalog, waiting-room and sold-out refresh, the waiting rooms' copies and inlet,
/// the sold-out channel, the reconciler, the consistency
/// export, the rule and edge domain watchers, the live-stats flush, the limiter's heartbeat, the
/// history's fold into Postgres and its retention, the block watcher and the offenders'
/// classification.
///
/// The committers are not among them: each worker thread's is started by its first
/// order, on that thread (`sale::committer`).
pub(super) fn background(settings: &Settings, services: &Services) -> BoxFuture<'static, ()> {
    let sale = &services.sale;
    // The sold-out channel's own connection: to the one server, any cluster node, or
    // the master or a replica the sentinels name (`RedisStore::subscriber_urls`).
    let listener = {
        let (redis, sold_out) = (services.redis.clone(), Arc::clone(&sale.sold_out));
        async move { sold_out.listen(redis.subscriber_urls().await).await }
    };
    let reconciler = Reconciler::new(sale, services.reservations).run(
        Duration::from_millis(settings.reconcile_interval_ms),
        uuid::Uuid::new_v4().to_string(),
    );
    let sweeper = Sweeper::new(sale).run(
        Duration::from_millis(settings.expiry_sweep_interval_ms.max(1)),
        uuid::Uuid::new_v4().to_string(),
    );
    let consistency = {
        let export = Arc::new(ConsistencyExport::new(sale));
        let period = Duration::from_secs(settings.consistency_interval_secs.max(1));
        background::every("consistency export", period, move || {
            let export = Arc::clone(&export);
            async move { export.run().await }
        })
    };
    let loops: Vec<BoxFuture<'static, ()>> = vec![
        refresh(
            Arc::clone(&services.items),
            Arc::clone(&services.rooms),
            Arc::clone(&sale.sold_out),
        )
        .boxed(),
        Arc::clone(&services.lobby)
            .run(Arc::clone(&services.rooms))
            .boxed(),
        Arc::new(Inlet::new(
            sale.clone(),
            Arc::clone(&services.rooms),
            Arc::clone(&services.lobby),
            Arc::clone(&services.room_redis),
        ))
        .run(uuid::Uuid::new_v4().to_string())
        .boxed(),
        listener.boxed(),
        reconciler.boxed(),
        sweeper.boxed(),
        consistency.boxed(),
        rules::watch(
            Arc::clone(&services.rules),
            Arc::clone(&services.limiter),
            Duration::from_millis(500),
        )
        .boxed(),
        Arc::clone(&services.domains)
            .watch(Duration::from_millis(500))
            .boxed(),
        Arc::clone(&services.stats).run().boxed(),
        Arc::clone(&services.limiter).beat().boxed(),
        Arc::new(Fold::new(
            services.redis.clone(),
            services.pool.clone(),
            Arc::clone(&services.metrics),
            &settings.history,
        ))
        .run()
        .boxed(),
        Retention::new(
            services.pool.clone(),
            services.redis.clone(),
            &settings.history,
        )
        .run()
        .boxed(),
        Arc::clone(&services.blocks).watch().boxed(),
        crate::history::offenders::watch(
            services.pool.clone(),
            services.metrics.offenders.clone(),
            CLASSIFY_EVERY,
        )
        .boxed(),
    ];
    futures_util::future::join_all(loops).map(drop).boxed()
}

/// How often `offenders{label}` is recomputed from the last hour's heavy hitters.
const CLASSIFY_EVERY: Duration = Duration::from_secs(60);

/// Other instances create items and sell stock too: every second, reload the catalog
/// (their items become purchasable here) and the waiting rooms' settings, and re-read
/// the stock counters (the safety net under the sold-out channel); and at once when an
/// operator's change is heard on that channel (`SoldOut::announce_change`).
async fn refresh(items: Arc<Items>, rooms: Arc<Rooms>, news: Arc<SoldOut>) {
    background::every_or_woken(
        "catalog and sold-out refresh",
        Duration::from_secs(1),
        || news.changed(),
        || {
            let items = Arc::clone(&items);
            let rooms = Arc::clone(&rooms);
            async move {
                items.reload_catalog().await.context("catalog reload")?;
                rooms.reload().await.context("waiting rooms reload")?;
                items.refresh_sold_out().await.context("sold-out check")
            }
        },
    )
    .await
}
