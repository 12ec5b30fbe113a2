//! `ShouldRateLimit`: a `RateLimitRequest` mapped onto the edge's engine and back. Input
//! the engine refuses, and what it cannot honour (a negative hit, a limit set by the
//! gateway), is `INVALID_ARGUMENT` with the reason: nothing is counted, and the gateway's
//! `failure_mode_deny` decides. A decision is never an error: a refusal is `OVER_LIMIT`.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit as PbUnit, Code as PbCode, DescriptorStatus as PbStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tokio::sync::Semaphore;
use tonic::{Request, Response, Status};

use crate::edge::domain_document::Unit;
use crate::edge::{Code, Descriptor, Edge, EdgeRequest, EdgeVerdict, Entry};
use crate::metrics::Metrics;

/// The service: the engine, and the bound on the decisions it runs at once.
pub struct RateLimitGrpc {
    edge: Arc<Edge>,
    metrics: Arc<Metrics>,
    /// Decisions in flight, over every connection: one more is answered
    /// `RESOURCE_EXHAUSTED` at once rather than queued behind Redis (the gateway's
    /// failure mode answers it), so a burst of gateway calls cannot pile up unbounded.
    in_flight: Semaphore,
}

impl RateLimitGrpc {
    /// The service over `edge`, deciding at most `max_in_flight` requests at once.
    pub fn new(edge: Arc<Edge>, metrics: Arc<Metrics>, max_in_flight: usize) -> Self {
        Self {
            edge,
            metrics,
            in_flight: Semaphore::new(max_in_flight),
        }
    }

    fn invalid(&self, message: String) -> Status {
        self.metrics.rls_invalid_requests.inc();
        Status::invalid_argument(message)
    }
}

#[tonic::async_trait]
impl RateLimitService for RateLimitGrpc {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let Ok(_permit) = self.in_flight.try_acquire() else {
            return Err(Status::resource_exhausted("too many decisions in flight"));
        };
        let request = edge_request(request.into_inner()).map_err(|m| self.invalid(m))?;
        let verdict = self
            .edge
            .decide(&request)
            .await
            .map_err(|e| self.invalid(e.to_string()))?;
        Ok(Response::new(response(verdict)))
    }
}

/// The engine's request, or why there is none: what Envoy asks that the engine would
/// count wrong if it were ignored.
fn edge_request(request: RateLimitRequest) -> Result<EdgeRequest, String> {
    let mut descriptors = Vec::with_capacity(request.descriptors.len());
    for (d, descriptor) in request.descriptors.into_iter().enumerate() {
        if descriptor.is_negative_hits {
            return Err(format!(
                "descriptors[{d}].is_negative_hits: hits are never given back"
            ));
        }
        if descriptor.limit.is_some() {
            return Err(format!(
                "descriptors[{d}].limit: limits are the domain's, not the gateway's"
            ));
        }
        descriptors.push(Descriptor {
            entries: descriptor
                .entries
                .into_iter()
                .map(|e| Entry {
                    key: e.key,
                    value: e.value,
                })
                .collect(),
            hits_addend: descriptor.hits_addend.map(|h| h.value),
        });
    }
    Ok(EdgeRequest {
        domain: request.domain,
        descriptors,
        hits_addend: u64::from(request.hits_addend),
    })
}

/// Envoy's answer for `verdict`: its codes, a status per descriptor, its headers.
fn response(verdict: EdgeVerdict) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: code(verdict.overall) as i32,
        statuses: verdict
            .statuses
            .into_iter()
            .map(|status| PbStatus {
                code: code(status.code) as i32,
                current_limit: status.current_limit.map(|limit| RateLimit {
                    name: limit.name,
                    requests_per_unit: limit.requests_per_unit,
                    unit: unit(limit.unit) as i32,
                }),
                limit_remaining: status.limit_remaining,
                duration_until_reset: status.duration_until_reset.map(|d| PbDuration {
                    seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
                }),
                quota: None,
            })
            .collect(),
        response_headers_to_add: verdict
            .headers
            .into_iter()
            .map(|(key, value)| HeaderValue {
                key: key.to_string(),
                value,
                raw_value: Vec::new(),
            })
            .collect(),
        ..RateLimitResponse::default()
    }
}

fn code(code: Code) -> PbCode {
    match code {
        Code::Ok => PbCode::Ok,
        Code::OverLimit => PbCode::OverLimit,
    }
}

fn unit(unit: Unit) -> PbUnit {
    match unit {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        rate_limit_descriptor, RateLimitDescriptor,
    };
    use envoy_types::pb::google::protobuf::UInt64Value;

    fn descriptor(hits: Option<u64>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: vec![rate_limit_descriptor::Entry {
                key: "remote_address".into(),
                value: "10.0.0.1".into(),
            }],
            hits_addend: hits.map(|value| UInt64Value { value }),
            ..RateLimitDescriptor::default()
        }
    }

    #[test]
    fn a_request_maps_its_entries_and_both_costs() {
        let request = RateLimitRequest {
            domain: "gateway".into(),
            descriptors: vec![descriptor(None), descriptor(Some(5))],
            hits_addend: 3,
        };
        let edge = edge_request(request).expect("a valid request");
        assert_eq!(edge.domain, "gateway");
        assert_eq!(edge.hits_addend, 3);
        assert_eq!(edge.descriptors[0].hits_addend, None);
        assert_eq!(edge.descriptors[1].hits_addend, Some(5));
        assert_eq!(edge.descriptors[1].entries[0].value, "10.0.0.1");
    }

    #[test]
    fn negative_hits_and_a_gateways_limit_are_refused_by_name() {
        let mut negative = descriptor(None);
        negative.is_negative_hits = true;
        let refused = edge_request(RateLimitRequest {
            domain: "gateway".into(),
            descriptors: vec![descriptor(None), negative],
            hits_addend: 0,
        });
        assert!(refused.is_err_and(|m| m.starts_with("descriptors[1].is_negative_hits")));
        let mut overridden = descriptor(None);
        overridden.limit = Some(Default::default());
        let refused = edge_request(RateLimitRequest {
            domain: "gateway".into(),
            descriptors: vec![overridden],
            hits_addend: 0,
        });
        assert!(refused.is_err_and(|m| m.starts_with("descriptors[0].limit")));
    }

    #[test]
    fn a_refusal_maps_codes_limits_durations_and_headers() {
        let verdict = EdgeVerdict {
            overall: Code::OverLimit,
            statuses: vec![crate::edge::DescriptorStatus {
                code: Code::OverLimit,
                current_limit: Some(crate::edge::CurrentLimit {
                    name: "per_ip".into(),
                    requests_per_unit: 10,
                    unit: Unit::Minute,
                }),
                limit_remaining: 0,
                duration_until_reset: Some(std::time::Duration::from_millis(1_500)),
            }],
            headers: vec![("Retry-After", "2".into())],
        };
        let answer = response(verdict);
        assert_eq!(answer.overall_code, PbCode::OverLimit as i32);
        let status = &answer.statuses[0];
        assert_eq!(status.code, PbCode::OverLimit as i32);
        let limit = status.current_limit.as_ref().expect("a limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("per_ip", 10, PbUnit::Minute as i32)
        );
        assert_eq!(
            status.duration_until_reset,
            Some(PbDuration {
                seconds: 1,
                nanos: 500_000_000
            })
        );
        assert_eq!(answer.response_headers_to_add[0].key, "Retry-After");
        assert_eq!(answer.response_headers_to_add[0].value, "2");
    }
}
