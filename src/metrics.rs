//! Prometheus metrics: one registry per process, built once at start-up and shared.
//!
//! Label values are bounded: route patterns, methods and status classes, policy and rule
//! names from configuration, fixed outcome words, and the ids of items on sale (removed
//! when the sale ends). Never a user id, an IP or an order id. Counters whose label
//! values are known up front start at 0, so a fresh instance already shows every series.

use prometheus::core::Collector;

use crate::tally::Tally;
use crate::vocabulary::{ConnectionCut, OrderState, Repair, TokenComparison, Word};
use prometheus::proto::Metric;
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Why a Redis call was made: the label of `seckill_redis_calls_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisPurpose {
    Limiter,
    Reservation,
    Pipeline,
    Idempotency,
    Other,
}

impl RedisPurpose {
    pub const ALL: [RedisPurpose; 5] = [
        Self::Limiter,
        Self::Reservation,
        Self::Pipeline,
        Self::Idempotency,
        Self::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Limiter => "limiter",
            Self::Reservation => "reservation",
            Self::Pipeline => "pipeline",
            Self::Idempotency => "idempotency",
            Self::Other => "other",
        }
    }
}

/// Latency buckets for request-scale work, 0.5 ms to 5 s: a loopback request answers in
/// about a millisecond; seconds mean queueing or a store in trouble.
const REQUEST_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

pub struct Metrics {
    registry: Registry,
    /// HTTP requests by route pattern (`unmatched` for unknown paths), method and
    /// status class.
    pub http_requests: IntCounterVec,
    pub http_duration: HistogramVec,
    /// Decisions by policy, dimension (rule) and outcome (`pass` / `reject`). A pass
    /// counts once for every rule of the policy, a reject once for the refusing rule.
    pub limiter_decisions: IntCounterVec,
    /// Requests let through because the limiter could not ask Redis.
    pub limiter_fail_open: IntCounterVec,
    /// Requests refused (503) because the limiter could not ask Redis.
    pub limiter_fail_closed: IntCounterVec,
    /// Refusals answered from the limiter's denial cache, without a Redis call. They are
    /// counted in `limiter_decisions` too, like any refusal.
    pub limiter_local_refusals: IntCounterVec,
    /// Round trip of one limiter script call.
    pub limiter_latency: HistogramVec,
    /// Redis calls that failed or timed out, by purpose.
    pub redis_errors: IntCounterVec,
    /// Redis calls made on behalf of requests, by purpose. Shows which answers cost no
    /// Redis at all (validation, item state, the sold-out fast path).
    pub redis_calls: IntCounterVec,
    /// Purchases by outcome (`vocabulary::Outcome`); the sale resolves their series.
    pub sale_outcomes: IntCounterVec,
    /// `redis_calls` and `redis_errors` resolved per purpose (indexed by
    /// `RedisPurpose as usize`): the request path increments without a label lookup.
    redis_call_counters: [IntCounter; RedisPurpose::ALL.len()],
    redis_error_counters: [IntCounter; RedisPurpose::ALL.len()],
    /// A purchase's wait for its order commit, successful or not: the committer's queue
    /// plus the batch that wrote it.
    pub order_commit: Histogram,
    /// Orders per committer batch (group commit): 1 at low load, growing with it.
    pub commit_batch_size: Histogram,
    /// Orders waiting for the committer, read at scrape time.
    pub commit_queue: IntGauge,
    /// Live Redis stock per item on sale; a series disappears when its sale ends.
    pub stock_remaining: IntGaugeVec,
    /// Items this instance knows to be sold out (answered from memory).
    pub sold_out_items: IntGauge,
    /// Postgres pool connections by pool (`main`, `commit`) and state (`in_use`,
    /// `idle`), read at scrape time.
    pub db_pool: IntGaugeVec,
    /// Order commits that found no connection in the commit pool within the acquire
    /// timeout. Reads have a pool of their own, so this stays 0 unless commits alone
    /// outrun `database_commit_connections`.
    pub commit_pool_timeouts: IntCounter,
    /// Per item on sale, every 15 s: orders in Postgres and the Redis success counter.
    /// They must agree; an alert fires when they do not for two minutes.
    pub consistency_postgres_orders: IntGaugeVec,
    pub consistency_redis_success: IntGaugeVec,
    /// What the reconciler repaired: `settled`, `released`, `drift`, `rebuilt`.
    pub reconciler_repairs: IntCounterVec,
    /// Orders moved out of `pending_payment`, by the state they moved to (`paid`,
    /// `cancelled`, `expired`), and units released orders gave back (each counted once,
    /// when Postgres marks it returned: to Redis, or to Postgres alone when its ended
    /// item's keys were gone).
    pub order_transitions: IntCounterVec,
    pub units_returned: IntCounter,
    /// Connections the connection guard ended, by reason: `per_address` (refused as they
    /// arrived: the address held its share) and `head_timeout` (a head took too long).
    pub connections_cut: IntCounterVec,
    /// Orders in Postgres by state, summed over the items on sale (with the consistency
    /// export).
    pub orders_by_state: IntGaugeVec,
    /// Rounds this instance led and finished: after a fault, a round that started
    /// later proves Redis was repaired from Postgres (the soak waits for one).
    pub reconciler_rounds: IntCounter,
    /// Admin tokens compared with the configured ones, by outcome (`accepted`,
    /// `refused`): every comparison is a guess an attacker got to make, so the lockout
    /// is measured by how few of these a burst gets.
    pub admin_token_comparisons: IntCounterVec,
    /// The same events as some of the series above, for the dashboard's stats flush
    /// (`crate::stats`), which never reads the series back.
    pub tally: Tally,
}

impl Metrics {
    pub fn new() -> anyhow::Result<Self> {
        let registry = Registry::new_custom(Some("seckill".into()), None)?;
        let counter = |name: &str, help: &str, labels: &[&str]| {
            registered(
                &registry,
                IntCounterVec::new(Opts::new(name, help), labels)?,
            )
        };
        let int_counter =
            |name: &str, help: &str| registered(&registry, IntCounter::new(name, help)?);
        let int_gauge = |name: &str, help: &str| registered(&registry, IntGauge::new(name, help)?);
        let gauge = |name: &str, help: &str, labels: &[&str]| {
            registered(&registry, IntGaugeVec::new(Opts::new(name, help), labels)?)
        };
        let histogram = |name: &str,
                         help: &str,
                         buckets: &[f64],
                         labels: &[&str]|
         -> anyhow::Result<HistogramVec> {
            registered(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(name, help).buckets(buckets.to_vec()),
                    labels,
                )?,
            )
        };

        let redis_calls = counter("redis_calls_total", "Redis calls by purpose", &["purpose"])?;
        let redis_errors = counter(
            "redis_errors_total",
            "Redis calls that failed or timed out",
            &["purpose"],
        )?;
        let sale_outcomes = counter("sale_outcomes_total", "Purchases by outcome", &["outcome"])?;
        let metrics = Self {
            redis_call_counters: RedisPurpose::ALL
                .map(|purpose| redis_calls.with_label_values(&[purpose.as_str()])),
            redis_error_counters: RedisPurpose::ALL
                .map(|purpose| redis_errors.with_label_values(&[purpose.as_str()])),
            redis_calls,
            redis_errors,
            sale_outcomes,
            http_requests: counter(
                "http_requests_total",
                "HTTP requests by route, method and status class",
                &["route", "method", "status"],
            )?,
            http_duration: histogram(
                "http_request_duration_seconds",
                "HTTP request latency",
                &REQUEST_BUCKETS,
                &["route", "method"],
            )?,
            limiter_decisions: counter(
                "limiter_decisions_total",
                "Limiter decisions by policy, dimension and outcome",
                &["policy", "dimension", "outcome"],
            )?,
            limiter_fail_open: counter(
                "limiter_fail_open_total",
                "Requests admitted without a decision because Redis failed",
                &["policy"],
            )?,
            limiter_fail_closed: counter(
                "limiter_fail_closed_total",
                "Requests refused because Redis failed",
                &["policy"],
            )?,
            limiter_local_refusals: counter(
                "limiter_local_refusals_total",
                "Refusals answered from the local denial cache without asking Redis",
                &["policy", "dimension"],
            )?,
            // 0.1 ms to 250 ms (the default limiter timeout): a loopback EVALSHA takes
            // ~0.1-1 ms; anything near the top is a struggling Redis.
            limiter_latency: histogram(
                "limiter_duration_seconds",
                "Limiter script round trip",
                &[
                    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                ],
                &["policy", "algorithm"],
            )?,
            order_commit: registered(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new("order_commit_duration_seconds", "Postgres order commit")
                        .buckets(REQUEST_BUCKETS.to_vec()),
                )?,
            )?,
            commit_batch_size: registered(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new("commit_batch_size", "Orders per committer batch").buckets(
                        vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0],
                    ),
                )?,
            )?,
            commit_queue: int_gauge("commit_queue_orders", "Orders waiting for the committer")?,
            stock_remaining: gauge(
                "stock_remaining",
                "Live stock of each item on sale (Redis)",
                &["item"],
            )?,
            sold_out_items: int_gauge(
                "sold_out_items",
                "Items this instance knows to be sold out",
            )?,
            db_pool: gauge(
                "db_pool_connections",
                "Postgres pool connections by pool and state",
                &["pool", "state"],
            )?,
            commit_pool_timeouts: int_counter(
                "order_commit_pool_timeouts_total",
                "Order commits that waited past the acquire timeout for a connection",
            )?,
            consistency_postgres_orders: gauge(
                "consistency_postgres_orders",
                "Orders in Postgres per item on sale",
                &["item"],
            )?,
            consistency_redis_success: gauge(
                "consistency_redis_success",
                "Redis success counter per item on sale",
                &["item"],
            )?,
            reconciler_repairs: counter(
                "reconciler_repairs_total",
                "Repairs made by the reconciler, by kind",
                &["kind"],
            )?,
            connections_cut: counter(
                "connections_cut_total",
                "Connections the connection guard ended, by reason",
                &["reason"],
            )?,
            order_transitions: counter(
                "order_transitions_total",
                "Orders moved out of pending_payment, by the state they moved to",
                &["to"],
            )?,
            units_returned: int_counter(
                "units_returned_total",
                "Units released orders gave back, counted when Postgres marks them returned",
            )?,
            reconciler_rounds: int_counter(
                "reconciler_rounds_total",
                "Reconciliation rounds this instance led and finished",
            )?,
            orders_by_state: gauge("orders_by_state", "Orders in Postgres by state", &["state"])?,
            admin_token_comparisons: counter(
                "admin_token_comparisons_total",
                "Admin tokens compared with the configured ones, by outcome",
                &["outcome"],
            )?,
            registry,
            tally: Tally::default(),
        };
        for to in OrderState::moves() {
            metrics.order_transitions.with_label_values(&[to.label()]);
        }
        for reason in ConnectionCut::labels() {
            metrics.connections_cut.with_label_values(&[reason]);
        }
        for kind in Repair::labels() {
            metrics.reconciler_repairs.with_label_values(&[kind]);
        }
        for pool in ["main", "commit"] {
            for state in ["in_use", "idle"] {
                metrics.db_pool.with_label_values(&[pool, state]);
            }
        }
        for outcome in TokenComparison::labels() {
            metrics
                .admin_token_comparisons
                .with_label_values(&[outcome]);
        }
        Ok(metrics)
    }

    pub fn redis_call(&self, purpose: RedisPurpose) {
        self.redis_call_counters[purpose as usize].inc();
    }

    pub fn redis_error(&self, purpose: RedisPurpose) {
        self.redis_error_counters[purpose as usize].inc();
    }

    /// The text exposition format for `GET /metrics`.
    pub fn render(&self) -> anyhow::Result<String> {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        Ok(String::from_utf8(buffer)?)
    }
}

/// `metric`, registered in `registry`.
fn registered<M: Collector + Clone + 'static>(registry: &Registry, metric: M) -> anyhow::Result<M> {
    registry.register(Box::new(metric.clone()))?;
    Ok(metric)
}

/// Every series of a one-label gauge (e.g. live stock per item), by its label value.
pub fn gauges_by_label(gauges: &IntGaugeVec) -> Vec<(String, i64)> {
    by_label(gauges, |m| m.get_gauge().get_value())
}

fn by_label(collector: &dyn Collector, value: fn(&Metric) -> f64) -> Vec<(String, i64)> {
    collector
        .collect()
        .iter()
        .flat_map(|family| family.get_metric())
        .filter_map(|m| Some((m.get_label().first()?.value().to_string(), value(m) as i64)))
        .collect()
}
