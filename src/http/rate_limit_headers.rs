//! The rate-limit headers of a limiter's answer, apart from the guard (`rate_limit`):
//! `ApiError` writes them on a refusal, and the guard itself needs `ApiError`, so in one
//! file the two would import each other.

use actix_web::http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::limiter::{Admission, Algorithm, Policy, Refusal};

fn insert(headers: &mut HeaderMap, name: &'static str, value: HeaderValue) {
    headers.insert(HeaderName::from_static(name), value);
}

/// The policy's `RateLimit-Policy`, built once per policy (see `Policy::quota_header`).
fn quota_header(policy: &Policy, algorithm: Algorithm) -> Option<HeaderValue> {
    HeaderValue::from_str(policy.quota_header(algorithm)).ok()
}

/// The rate-limit headers of a limiter's answer (`RateLimit`, `RateLimit-Policy`,
/// `X-RateLimit-*`, for a shaped admission `RateLimit-Delay-Ms`, and for a refusal
/// `Retry-After`, `Retry-After-Ms`).
pub trait RateLimitHeaders {
    /// Writes the headers into `headers`.
    fn write_headers(&self, headers: &mut HeaderMap);
}

impl RateLimitHeaders for Admission {
    /// Informational headers for a pass: the tightest rule's remaining count.
    fn write_headers(&self, headers: &mut HeaderMap) {
        insert(
            headers,
            "x-ratelimit-policy",
            HeaderValue::from_static(self.algorithm.as_str()),
        );
        let Some(quota) = self.quota_left else {
            return; // failed open: nothing is known about the quota
        };
        if let Some(value) = quota_header(&self.policy, self.algorithm) {
            insert(headers, "ratelimit-policy", value);
        }
        insert(headers, "x-ratelimit-remaining", quota.remaining.into());
        let rule = &self.policy.rules[quota.rule];
        if let Ok(value) =
            HeaderValue::from_str(&format!("\"{}\";r={}", rule.name, quota.remaining))
        {
            insert(headers, "ratelimit", value);
        }
        if self.delayed_ms > 0 {
            // The leaky bucket held the answer for its departure slot.
            insert(headers, "ratelimit-delay-ms", self.delayed_ms.into());
        }
    }
}

impl RateLimitHeaders for Refusal {
    fn write_headers(&self, headers: &mut HeaderMap) {
        let longest = self.retry_after_ms();
        insert(headers, "retry-after", longest.div_ceil(1000).into());
        insert(headers, "retry-after-ms", longest.into());
        insert(
            headers,
            "x-ratelimit-policy",
            HeaderValue::from_static(self.algorithm.as_str()),
        );
        insert(
            headers,
            "x-ratelimit-remaining",
            HeaderValue::from_static("0"),
        );
        if let Some(value) = quota_header(&self.policy, self.algorithm) {
            insert(headers, "ratelimit-policy", value);
        }
        let ratelimit = format!(
            "\"{}\";r=0;t={}",
            self.dimension(),
            self.own_wait_ms.div_ceil(1000)
        );
        if let Ok(value) = HeaderValue::from_str(&ratelimit) {
            insert(headers, "ratelimit", value);
        }
    }
}
