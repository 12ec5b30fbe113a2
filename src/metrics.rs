//! Prometheus metrics: one registry per process, built once at start-up and shared.
//!
//! Label values are bounded: policy and rule names come from configuration, outcomes
//! are fixed words. Never a user id, an IP or an order id.

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, Opts, Registry, TextEncoder,
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

pub struct Metrics {
    registry: Registry,
    /// Decisions by policy, dimension (rule) and outcome (`pass` / `reject`). A pass
    /// counts once for every rule of the policy, a reject once for the refusing rule.
    pub limiter_decisions: IntCounterVec,
    /// Requests let through because the limiter could not ask Redis.
    pub limiter_fail_open: IntCounterVec,
    /// Requests refused (503) because the limiter could not ask Redis.
    pub limiter_fail_closed: IntCounterVec,
    /// Round trip of one limiter script call.
    pub limiter_latency: HistogramVec,
    /// Redis calls that failed or timed out, by purpose.
    pub redis_errors: IntCounterVec,
    /// Redis calls made on behalf of requests, by purpose. Shows which answers cost no
    /// Redis at all (validation, item state, the sold-out fast path).
    pub redis_calls: IntCounterVec,
    /// Items this instance knows to be sold out (answered from memory).
    pub sold_out_items: IntGauge,
    /// What the reconciler repaired: `settled`, `released`, `drift`, `rebuilt`.
    pub reconciler_repairs: IntCounterVec,
}

impl Metrics {
    pub fn new() -> anyhow::Result<Self> {
        let registry = Registry::new_custom(Some("seckill".into()), None)?;
        let limiter_decisions = IntCounterVec::new(
            Opts::new(
                "limiter_decisions_total",
                "Limiter decisions by policy, dimension and outcome",
            ),
            &["policy", "dimension", "outcome"],
        )?;
        let limiter_fail_open = IntCounterVec::new(
            Opts::new(
                "limiter_fail_open_total",
                "Requests admitted without a decision because Redis failed",
            ),
            &["policy"],
        )?;
        let limiter_fail_closed = IntCounterVec::new(
            Opts::new(
                "limiter_fail_closed_total",
                "Requests refused because Redis failed",
            ),
            &["policy"],
        )?;
        // Buckets from 0.1 ms to 250 ms (the default limiter timeout): a loopback
        // EVALSHA takes ~0.1-1 ms; anything near the top is a struggling Redis.
        let limiter_latency = HistogramVec::new(
            HistogramOpts::new("limiter_duration_seconds", "Limiter script round trip").buckets(
                vec![
                    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                ],
            ),
            &["policy", "algorithm"],
        )?;
        let redis_errors = IntCounterVec::new(
            Opts::new("redis_errors_total", "Redis calls that failed or timed out"),
            &["purpose"],
        )?;
        let redis_calls = IntCounterVec::new(
            Opts::new("redis_calls_total", "Redis calls by purpose"),
            &["purpose"],
        )?;
        for purpose in RedisPurpose::ALL {
            redis_calls.with_label_values(&[purpose.as_str()]);
            redis_errors.with_label_values(&[purpose.as_str()]);
        }
        registry.register(Box::new(redis_calls.clone()))?;
        let sold_out_items =
            IntGauge::new("sold_out_items", "Items this instance knows to be sold out")?;
        registry.register(Box::new(sold_out_items.clone()))?;
        let reconciler_repairs = IntCounterVec::new(
            Opts::new(
                "reconciler_repairs_total",
                "Repairs made by the reconciler, by kind",
            ),
            &["kind"],
        )?;
        for kind in ["settled", "released", "drift", "rebuilt"] {
            reconciler_repairs.with_label_values(&[kind]);
        }
        registry.register(Box::new(reconciler_repairs.clone()))?;
        registry.register(Box::new(limiter_decisions.clone()))?;
        registry.register(Box::new(limiter_fail_open.clone()))?;
        registry.register(Box::new(limiter_fail_closed.clone()))?;
        registry.register(Box::new(limiter_latency.clone()))?;
        registry.register(Box::new(redis_errors.clone()))?;
        Ok(Self {
            registry,
            limiter_decisions,
            limiter_fail_open,
            limiter_fail_closed,
            limiter_latency,
            redis_errors,
            redis_calls,
            sold_out_items,
            reconciler_repairs,
        })
    }

    pub fn redis_call(&self, purpose: RedisPurpose) {
        self.redis_calls
            .with_label_values(&[purpose.as_str()])
            .inc();
    }

    /// The text exposition format for `GET /metrics`.
    pub fn render(&self) -> anyhow::Result<String> {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        Ok(String::from_utf8(buffer)?)
    }
}
