//! Prometheus metrics: one registry per process, built once at start-up and shared.
//!
//! Every family is one row of the table in `families!`: its field, its type (the kind
//! of metric), name, help, labels, buckets, and the label values whose series exist at 0
//! from the start (so a fresh instance already shows them). Label values are bounded:
//! route patterns, methods and status classes, policy and rule names from
//! configuration, the words of [`crate::vocabulary`], and the ids of items on sale
//! (removed when the sale ends). Never a user id, an IP or an order id.
//!
//! The dashboard does not read these back: its numbers come from the [`Tally`] beside
//! them, which the same events count.

use std::marker::PhantomData;
use std::ops::Deref;

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::tally::Tally;
use crate::vocabulary::{
    BreakerState, ConnectionCut, OrderState, PassOutcome, Repair, TokenComparison, Word,
};

/// Why a Redis call was made: the label of `seckill_redis_calls_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisPurpose {
    /// The limiter's decisions.
    Limiter,
    /// The stock reservation.
    Reservation,
    /// The success pipeline after a purchase.
    Pipeline,
    /// `Idempotency-Key` claims.
    Idempotency,
    /// The waiting room: joins, the inlet, the lobby's reads, liveness.
    Queue,
    /// Everything else (the reconciler, the sweeper, admin work, …).
    Other,
}

impl RedisPurpose {
    /// Every purpose, in the order of their discriminants (the counters are indexed by
    /// them).
    pub const ALL: [RedisPurpose; 6] = [
        Self::Limiter,
        Self::Reservation,
        Self::Pipeline,
        Self::Idempotency,
        Self::Queue,
        Self::Other,
    ];

    /// The `purpose` label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Limiter => "limiter",
            Self::Reservation => "reservation",
            Self::Pipeline => "pipeline",
            Self::Idempotency => "idempotency",
            Self::Queue => "queue",
            Self::Other => "other",
        }
    }
}

/// Latency buckets for request-scale work, 0.5 ms to 5 s: a loopback request answers in
/// about a millisecond; seconds mean queueing or a store in trouble.
const REQUEST_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// 0.1 ms to 250 ms (the default limiter timeout): a loopback EVALSHA takes ~0.1-1 ms;
/// anything near the top is a struggling Redis.
const LIMITER_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
];

const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// The table: one row per family, `field: Type = family(name, help, labels)`, with
/// `.buckets(…)` for a histogram and `.seeded(…)` for the series that exist from the
/// start. The macro declares [`Families`] and registers every row.
macro_rules! families {
    ($( $(#[$doc:meta])* $field:ident: $ty:ty = $family:expr; )*) => {
        /// Every metric family, one field per row of the table.
        pub struct Families {
            $( $(#[$doc])* pub $field: $ty, )*
        }

        impl Families {
            fn register(registry: &Registry) -> anyhow::Result<Self> {
                Ok(Self {
                    $( $field: {
                        let family: Family<$ty> = $family;
                        family.register(registry)?
                    }, )*
                })
            }
        }
    };
}

families! {
    /// HTTP requests by route pattern (`unmatched` for unknown paths), method and
    /// status class.
    http_requests: IntCounterVec = family(
        "http_requests_total",
        "HTTP requests by route, method and status class",
        &["route", "method", "status"],
    );
    /// HTTP request latency by route pattern and method, in seconds.
    http_duration: HistogramVec =
        family("http_request_duration_seconds", "HTTP request latency", &["route", "method"])
            .buckets(REQUEST_BUCKETS);
    /// Decisions by policy, dimension (rule) and outcome (`pass` / `reject`). A pass
    /// counts once for every rule of the policy, a reject once for the refusing rule.
    limiter_decisions: IntCounterVec = family(
        "limiter_decisions_total",
        "Limiter decisions by policy, dimension and outcome",
        &["policy", "dimension", "outcome"],
    );
    /// Requests let through because the limiter could not ask Redis.
    limiter_fail_open: IntCounterVec = family(
        "limiter_fail_open_total",
        "Requests admitted without a decision because Redis failed",
        &["policy"],
    );
    /// Requests refused (503) because the limiter could not ask Redis.
    limiter_fail_closed: IntCounterVec = family(
        "limiter_fail_closed_total",
        "Requests refused because Redis failed",
        &["policy"],
    );
    /// Which way each policy decided last (`redis`, `local`, `open`, `closed`): 1 on
    /// that mode's series, 0 on the others. `local` is the fallback limits deciding in
    /// process while Redis cannot be asked.
    limiter_mode: IntGaugeVec = family(
        "limiter_mode",
        "Which way each policy is deciding: redis, local (fallback limits), open or closed",
        &["policy", "mode"],
    );
    /// Instances alive at the last limiter heartbeat Redis answered: the fallback limits
    /// share each rule's threshold among them.
    limiter_instances: IntGauge = family(
        "limiter_instances",
        "Instances sharing the limits, at the last heartbeat Redis answered",
        &[],
    );
    /// Refusals answered from the limiter's denial cache, without a Redis call. They are
    /// counted in `limiter_decisions` too, like any refusal.
    limiter_local_refusals: IntCounterVec = family(
        "limiter_local_refusals_total",
        "Refusals answered from the local denial cache without asking Redis",
        &["policy", "dimension"],
    );
    /// Admissions that left a rule above 80 % of its quota used (envoy's `near_limit`):
    /// alerts can fire on it before refusals start.
    limiter_near_limit: IntCounterVec = family(
        "limiter_near_limit_total",
        "Admissions that left a rule above 80 % of its quota used",
        &["policy", "dimension"],
    );
    /// Requests a shadow rule would have refused (it never refuses; see
    /// `limiter::backend`).
    limiter_shadow_refusals: IntCounterVec = family(
        "limiter_shadow_refusals_total",
        "Requests a shadow rule would have refused",
        &["policy", "dimension"],
    );
    /// The edge's decisions (`edge::Edge::decide`: Envoy's gRPC API, the NGINX gate) by
    /// domain, rule and outcome (`pass` / `reject`), counted as `limiter_decisions` is:
    /// a pass for every rule of the request, a reject for the refusing one; a shadow
    /// rule's `reject` is the refusal it did not make. A request no rule limits counts
    /// once under rule `none`; a domain not stored is `unknown`. Bounded by the stored
    /// domains and their documents.
    rls_decisions: IntCounterVec = family(
        "rls_decisions_total",
        "Edge decisions by domain, rule and outcome",
        &["domain", "rule", "outcome"],
    );
    /// Edge requests answered by the domain's fail mode (`open`, `closed`, `local`)
    /// because Redis could not be asked.
    rls_fail_mode: IntCounterVec = family(
        "rls_fail_mode_total",
        "Edge requests answered by the domain's fail mode while Redis could not be asked",
        &["domain", "mode"],
    );
    /// Edge refusals the denial cache answered without asking Redis (also counted as
    /// the rule's `reject` in `rls_decisions`): a domain edit starts a new generation,
    /// so none outlives a raised limit.
    rls_local_refusals: IntCounterVec = family(
        "rls_local_refusals_total",
        "Edge refusals answered by the denial cache, by domain and rule",
        &["domain", "rule"],
    );
    /// gRPC `ShouldRateLimit` calls answered `INVALID_ARGUMENT` (nothing counted).
    rls_invalid_requests: IntCounter = family(
        "rls_invalid_requests_total",
        "Rate-limit service calls refused as INVALID_ARGUMENT",
        &[],
    );
    /// Round trip of one limiter script call.
    limiter_latency: HistogramVec =
        family("limiter_duration_seconds", "Limiter script round trip", &["policy", "algorithm"])
            .buckets(LIMITER_BUCKETS);
    /// Redis calls that failed or timed out, by purpose.
    redis_errors: IntCounterVec =
        family("redis_errors_total", "Redis calls that failed or timed out", &["purpose"]);
    /// Redis calls made on behalf of requests, by purpose. Shows which answers cost no
    /// Redis at all (validation, item state, the sold-out fast path).
    redis_calls: IntCounterVec =
        family("redis_calls_total", "Redis calls by purpose", &["purpose"]);
    /// Purchases by outcome (`vocabulary::Outcome`); the sale resolves their series.
    sale_outcomes: IntCounterVec =
        family("sale_outcomes_total", "Purchases by outcome", &["outcome"]);
    /// A purchase's wait for its order commit, successful or not: the committer's queue
    /// plus the batch that wrote it.
    order_commit: Histogram =
        family("order_commit_duration_seconds", "Postgres order commit", &[])
            .buckets(REQUEST_BUCKETS);
    /// Orders per committer batch (group commit): 1 at low load, growing with it.
    commit_batch_size: Histogram =
        family("commit_batch_size", "Orders per committer batch", &[]).buckets(BATCH_BUCKETS);
    /// Orders waiting for a committer, over every worker thread's, read at scrape time.
    commit_queue: IntGauge =
        family("commit_queue_orders", "Orders waiting for a committer", &[]);
    /// Live Redis stock per item on sale; a series disappears when its sale ends.
    stock_remaining: IntGaugeVec =
        family("stock_remaining", "Live stock of each item on sale (Redis)", &["item"]);
    /// Items this instance knows to be sold out (answered from memory).
    sold_out_items: IntGauge =
        family("sold_out_items", "Items this instance knows to be sold out", &[]);
    /// Postgres connections by pool (`main`; `commit`, the committers' own sessions
    /// over every worker thread) and state (`in_use`, `idle`), read at scrape time.
    db_pool: IntGaugeVec = family(
        "db_pool_connections",
        "Postgres pool connections by pool and state",
        &["pool", "state"],
    )
    .seeded([["main", "in_use"], ["main", "idle"], ["commit", "in_use"], ["commit", "idle"]]);
    /// Order commits that could not get a commit connection (open one) within the
    /// commit budget. Reads have a pool of their own, so this stays 0 unless Postgres
    /// refuses or is slow to accept connections.
    commit_pool_timeouts: IntCounter = family(
        "order_commit_pool_timeouts_total",
        "Order commits that got no commit connection within the commit budget",
        &[],
    );
    /// The purchase path's concurrency limit (`sale::overload::shedding`): it falls
    /// when commits slow down, grows back when they are fast; 0 while shedding is off.
    shedding_limit: IntGauge =
        family("shedding_limit", "Concurrency limit of admitted purchases", &[]);
    /// Admitted purchases past the overload guards and not ended, read at scrape time.
    shedding_in_flight: IntGauge =
        family("shedding_in_flight", "Admitted purchases in flight", &[]);
    /// Purchases answered 503 `OVERLOADED` because the limit was reached.
    shedding_shed: IntCounter = family(
        "shedding_shed_total",
        "Purchases shed at the concurrency limit (503 OVERLOADED)",
        &[],
    );
    /// The orders breaker (`sale::overload::breaker`): 0 closed, 1 open, 2 half-open
    /// (a probe's commit in flight).
    orders_breaker_state: IntGauge = family(
        "orders_breaker_state",
        "Orders breaker: 0 closed, 1 open, 2 half-open",
        &[],
    );
    /// The breaker's moves, by the state entered (`vocabulary::BreakerState`).
    orders_breaker_transitions: IntCounterVec = family(
        "orders_breaker_transitions_total",
        "Orders breaker transitions, by the state entered",
        &["to"],
    )
    .seeded(BreakerState::labels().map(|to| [to]));
    /// Per item on sale, every 15 s: orders in Postgres and the Redis success counter.
    /// They must agree; an alert fires when they do not for two minutes.
    consistency_postgres_orders: IntGaugeVec =
        family("consistency_postgres_orders", "Orders in Postgres per item on sale", &["item"]);
    /// The Redis success counter per item on sale: held against the live orders in Postgres
    /// by an alert.
    consistency_redis_success: IntGaugeVec = family(
        "consistency_redis_success",
        "Redis success counter per item on sale",
        &["item"],
    );
    /// What the reconciler repaired (`vocabulary::Repair`).
    reconciler_repairs: IntCounterVec =
        family("reconciler_repairs_total", "Repairs made by the reconciler, by kind", &["kind"])
            .seeded(Repair::labels().map(|kind| [kind]));
    /// Connections the connection guard ended, by reason (`vocabulary::ConnectionCut`).
    connections_cut: IntCounterVec = family(
        "connections_cut_total",
        "Connections the connection guard ended, by reason",
        &["reason"],
    )
    .seeded(ConnectionCut::labels().map(|reason| [reason]));
    /// Orders moved out of `pending_payment`, by the state they moved to.
    order_transitions: IntCounterVec = family(
        "order_transitions_total",
        "Orders moved out of pending_payment, by the state they moved to",
        &["to"],
    )
    .seeded(OrderState::moves().map(|to| [to.label()]));
    /// Units released orders gave back, each counted once, when Postgres marks it
    /// returned: to Redis, or to Postgres alone when its ended item's keys were gone.
    units_returned: IntCounter = family(
        "units_returned_total",
        "Units released orders gave back, counted when Postgres marks them returned",
        &[],
    );
    /// Orders in Postgres by state, summed over the items on sale (with the consistency
    /// export).
    orders_by_state: IntGaugeVec =
        family("orders_by_state", "Orders in Postgres by state", &["state"]);
    /// Rounds this instance led and finished: after a fault, a round that started
    /// later proves Redis was repaired from Postgres (the soak waits for one).
    reconciler_rounds: IntCounter = family(
        "reconciler_rounds_total",
        "Reconciliation rounds this instance led and finished",
        &[],
    );
    /// Admin tokens compared with the configured ones, by outcome: every comparison is
    /// a guess an attacker got to make, so the lockout is measured by how few of these
    /// a burst gets.
    admin_token_comparisons: IntCounterVec = family(
        "admin_token_comparisons_total",
        "Admin tokens compared with the configured ones, by outcome",
        &["outcome"],
    )
    .seeded(TokenComparison::labels().map(|outcome| [outcome]));
    /// Always 1: which build serves (`version` from Cargo.toml, `commit` from the
    /// `commit` setting, read at start: [`Metrics::serving`]).
    build_info: IntGaugeVec = family(
        "build_info",
        "The build serving: version and commit",
        &["version", "commit"],
    );
    /// Shoppers who joined a waiting room (a second join of the same user is not one).
    queue_joins: IntCounter =
        family("queue_joins_total", "Shoppers who joined a waiting room", &[]);
    /// Places the inlet admitted (counted by the instance that ran the step).
    queue_admissions: IntCounter =
        family("queue_admissions_total", "Waiting-room places admitted", &[]);
    /// Places the inlet skipped because their shopper stopped polling.
    queue_abandoned: IntCounter =
        family("queue_abandoned_total", "Waiting-room places skipped as abandoned", &[]);
    /// Shoppers placed and not reached yet, summed over the rooms, as this instance
    /// last read them.
    queue_waiting: IntGauge =
        family("queue_waiting", "Shoppers waiting in the waiting rooms", &[]);
    /// Queue passes offered with a purchase, by outcome (`vocabulary::PassOutcome`).
    queue_passes: IntCounterVec = family(
        "queue_passes_total",
        "Queue passes offered with a purchase, by outcome",
        &["outcome"],
    )
    .seeded(PassOutcome::labels().map(|outcome| [outcome]));
    /// What the history lost before Postgres: `record` (a second's record that found
    /// the stream at its cap, or could not be written), `sample` (a sampled refusal past
    /// the per-second bound).
    history_dropped: IntCounterVec = family(
        "history_dropped_total",
        "History records and refusal samples dropped before the fold",
        &["what"],
    )
    .seeded([["record"], ["sample"]]);
    /// The stream's length as this instance's flush last read it: records appended
    /// and not folded yet.
    history_backlog: IntGauge =
        family("history_backlog", "History records waiting in the stream to be folded", &[]);
    /// The stream's cap (`history.stream_max_len`): the backlog alert's denominator.
    history_backlog_cap: IntGauge =
        family("history_backlog_cap", "The history stream's cap, in records", &[]);
    /// Records this instance's fold added to Postgres (a redelivered one is not).
    history_folded: IntCounter =
        family("history_folded_total", "History records folded into Postgres", &[]);
    /// The offenders of the last hour by label (`shared_address`, `scripted_account`,
    /// `burst_source`, `queue_farmer`), as this instance last classified them: counts
    /// only, never a user or an address.
    offenders: IntGaugeVec = family(
        "offenders",
        "Offenders of the last hour by classification label",
        &["label"],
    );
    /// Requests answered 403 `BLOCKED` by an operator's block, by policy (the policy
    /// that would have decided it; `queue_poll` for the waiting room's poll, which no
    /// policy guards).
    blocked: IntCounterVec = family(
        "blocked_total",
        "Requests refused by an operator's block",
        &["policy"],
    );
}

/// The registry, every family ([`Families`], reached through `Deref`: `metrics.x` is
/// the family `x`), the per-purpose Redis counters resolved once, and the tally.
pub struct Metrics {
    registry: Registry,
    /// The process collector's (`process_*`: CPU, memory, file descriptors), without
    /// the `seckill_` prefix, as every Prometheus user expects them.
    process: Registry,
    families: Families,
    /// `redis_calls` and `redis_errors` resolved per purpose (indexed by
    /// `RedisPurpose as usize`): the request path increments without a label lookup.
    redis_call_counters: [IntCounter; RedisPurpose::ALL.len()],
    redis_error_counters: [IntCounter; RedisPurpose::ALL.len()],
    /// The same events as some of the families, for the dashboard's stats flush
    /// (`crate::stats`), which never reads the families back.
    pub tally: Tally,
}

impl Deref for Metrics {
    type Target = Families;

    fn deref(&self) -> &Families {
        &self.families
    }
}

impl Metrics {
    /// A registry with every family registered, prefixed `seckill_`.
    pub fn new() -> anyhow::Result<Self> {
        let registry = Registry::new_custom(Some("seckill".into()), None)?;
        let families = Families::register(&registry)?;
        let process = Registry::new();
        process.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        let resolve = |family: &IntCounterVec| {
            RedisPurpose::ALL.map(|purpose| family.with_label_values(&[purpose.as_str()]))
        };
        Ok(Self {
            redis_call_counters: resolve(&families.redis_calls),
            redis_error_counters: resolve(&families.redis_errors),
            registry,
            process,
            families,
            tally: Tally::default(),
        })
    }

    /// Names the build serving on `build_info`: this version, and `commit` as the settings
    /// give it. Read at start rather than compiled in (`option_env!`), so a new commit
    /// never makes cargo rebuild an unchanged tree (`make run`).
    pub fn serving(&self, commit: &str) {
        self.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), commit])
            .set(1);
    }

    /// Counts a Redis call made for `purpose`.
    pub fn redis_call(&self, purpose: RedisPurpose) {
        self.redis_call_counters[purpose as usize].inc();
    }

    /// Counts a Redis call for `purpose` that failed or timed out.
    pub fn redis_error(&self, purpose: RedisPurpose) {
        self.redis_error_counters[purpose as usize].inc();
    }

    /// The text exposition format for `GET /metrics`.
    pub fn render(&self) -> anyhow::Result<String> {
        let mut buffer = Vec::new();
        let mut gathered = self.registry.gather();
        gathered.extend(self.process.gather());
        TextEncoder::new().encode(&gathered, &mut buffer)?;
        Ok(String::from_utf8(buffer)?)
    }
}

/// One row of the table: what to build and register.
struct Family<M> {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    buckets: &'static [f64],
    seeds: Vec<Vec<&'static str>>,
    kind: PhantomData<M>,
}

fn family<M>(name: &'static str, help: &'static str, labels: &'static [&'static str]) -> Family<M> {
    Family {
        name,
        help,
        labels,
        buckets: &[],
        seeds: Vec::new(),
        kind: PhantomData,
    }
}

impl<M: Kind> Family<M> {
    fn buckets(mut self, buckets: &'static [f64]) -> Self {
        self.buckets = buckets;
        self
    }

    /// Series (label values, in the labels' order) that exist at 0 from the start.
    fn seeded<S: AsRef<[&'static str]>>(mut self, seeds: impl IntoIterator<Item = S>) -> Self {
        self.seeds = seeds.into_iter().map(|s| s.as_ref().to_vec()).collect();
        self
    }

    fn register(self, registry: &Registry) -> anyhow::Result<M> {
        let metric = M::build(&self)?;
        registry.register(Box::new(metric.clone()))?;
        for values in &self.seeds {
            metric.seed(values);
        }
        Ok(metric)
    }
}

/// A kind of metric a row can build.
trait Kind: Collector + Clone + Sized + 'static {
    fn build(family: &Family<Self>) -> prometheus::Result<Self>;

    /// Makes the series of these label values exist (a no-op for an unlabelled one).
    fn seed(&self, _values: &[&str]) {}
}

fn opts<M>(family: &Family<M>) -> Opts {
    Opts::new(family.name, family.help)
}

fn histogram_opts<M>(family: &Family<M>) -> HistogramOpts {
    HistogramOpts::new(family.name, family.help).buckets(family.buckets.to_vec())
}

impl Kind for IntCounterVec {
    fn build(family: &Family<Self>) -> prometheus::Result<Self> {
        IntCounterVec::new(opts(family), family.labels)
    }

    fn seed(&self, values: &[&str]) {
        self.with_label_values(values);
    }
}

impl Kind for IntGaugeVec {
    fn build(family: &Family<Self>) -> prometheus::Result<Self> {
        IntGaugeVec::new(opts(family), family.labels)
    }

    fn seed(&self, values: &[&str]) {
        self.with_label_values(values);
    }
}

impl Kind for HistogramVec {
    fn build(family: &Family<Self>) -> prometheus::Result<Self> {
        HistogramVec::new(histogram_opts(family), family.labels)
    }
}

impl Kind for IntCounter {
    fn build(family: &Family<Self>) -> prometheus::Result<Self> {
        IntCounter::with_opts(opts(family))
    }
}

impl Kind for IntGauge {
    fn build(family: &Family<Self>) -> prometheus::Result<Self> {
        IntGauge::with_opts(opts(family))
    }
}

impl Kind for Histogram {
    fn build(family: &Family<Self>) -> prometheus::Result<Self> {
        Histogram::with_opts(histogram_opts(family))
    }
}
