//! The NGINX gate's decision endpoint (issue 40; docs/edge.md, "NGINX gate"): what
//! NGINX's `auth_request` subrequest asks before it proxies a client's request on.
//!
//! It is served on a listener of its own (`gate_port`, see `startup::server`), never on
//! the service's port: the shipped NGINX proxies all client traffic to the service from
//! one trusted address, so any location there would reach it. Only NGINX's `internal`
//! location sets the headers below, overwriting whatever the client sent:
//!
//! - `X-Gate-Secret`: `gate_secret`, compared in constant time. Missing or wrong answers
//!   500 `GATE_SECRET_INVALID` (a misconfiguration, not the client's fault; NGINX
//!   answers any status but 2xx, 401 and 403 with 500 anyway).
//! - `X-Gate-Domain`: the domain whose limits apply.
//! - `X-Gate-Descriptor`: one descriptor, its entries as a form-urlencoded
//!   `key=value&key=value` in order; one header line per descriptor, in order (lines a
//!   proxy folded into one, comma-separated, are read apart again: a comma in a key or
//!   value is `%2C`).
//!
//! The answer has no body: 200 admitted, 403 refused (the only refusal `auth_request`
//! passes on), each with the verdict's `RateLimit-Policy`, `RateLimit` and
//! `Retry-After` for NGINX to copy; 400 `VALIDATION_FAILED` naming the header for a
//! request past [`EdgeInputError`]'s bounds (NGINX then answers 500).

use actix_web::http::header::HeaderMap;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use super::fallback::resource;
use super::ApiError;
use crate::edge::decision::{MAX_DESCRIPTORS, MAX_ENTRIES};
use crate::edge::{Code, Descriptor, Edge, EdgeInputError, EdgeRequest, Entry};

/// The decision's path on the gate's listener.
pub const PATH: &str = "/decide";
/// The shared secret's header.
pub const SECRET_HEADER: &str = "x-gate-secret";
/// The domain's header.
pub const DOMAIN_HEADER: &str = "x-gate-domain";
/// A descriptor's header (one line each).
pub const DESCRIPTOR_HEADER: &str = "x-gate-descriptor";

/// The secret NGINX proves itself with (`gate_secret`).
pub struct GateSecret(SecretString);

impl GateSecret {
    /// The configured secret.
    pub fn new(secret: SecretString) -> Self {
        Self(secret)
    }

    /// Whether `presented` is the secret, compared in constant time so that the answer's
    /// timing does not tell how much of a guess was right.
    fn admits(&self, presented: Option<&[u8]>) -> bool {
        let secret = self.0.expose_secret().as_bytes();
        presented.is_some_and(|p| !secret.is_empty() && bool::from(secret.ct_eq(p)))
    }
}

/// The gate's one route.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(resource(PATH).route(web::get().to(decide)));
}

/// Decides the request NGINX describes (see the module docs).
async fn decide(
    request: HttpRequest,
    edge: web::Data<Edge>,
    secret: web::Data<GateSecret>,
) -> Result<HttpResponse, ApiError> {
    let headers = request.headers();
    if !secret.admits(headers.get(SECRET_HEADER).map(|v| v.as_bytes())) {
        return Err(ApiError::GateSecretInvalid);
    }
    let asked = edge_request(headers)?;
    let verdict = edge.decide(&asked).await.map_err(input_error)?;
    let mut response = HttpResponse::build(match verdict.overall {
        Code::Ok => StatusCode::OK,
        Code::OverLimit => StatusCode::FORBIDDEN,
    });
    for (name, value) in &verdict.headers {
        response.insert_header((*name, value.as_str()));
    }
    Ok(response.finish())
}

/// The [`EdgeRequest`] the headers spell. Only the shape is read here; the bounds are
/// [`Edge::decide`]'s (past [`MAX_DESCRIPTORS`], no more is parsed).
pub fn edge_request(headers: &HeaderMap) -> Result<EdgeRequest, ApiError> {
    let domain = match headers.get(DOMAIN_HEADER).map(|v| v.to_str()) {
        Some(Ok(domain)) => domain.trim().to_string(),
        Some(Err(_)) => return Err(input_error(EdgeInputError::Domain)),
        None => String::new(),
    };
    let mut descriptors = Vec::new();
    for line in headers.get_all(DESCRIPTOR_HEADER) {
        let line = line.to_str().map_err(|_| {
            ApiError::validation(
                "X-Gate-Descriptor",
                "must be form-urlencoded `key=value&key=value`",
            )
        })?;
        for one in line.split(',') {
            if descriptors.len() > MAX_DESCRIPTORS {
                return Err(input_error(EdgeInputError::TooManyDescriptors));
            }
            let entries = form_urlencoded::parse(one.trim().as_bytes())
                .take(MAX_ENTRIES + 1)
                .map(|(key, value)| Entry {
                    key: key.into_owned(),
                    value: value.into_owned(),
                })
                .collect();
            descriptors.push(Descriptor {
                entries,
                hits_addend: None,
            });
        }
    }
    Ok(EdgeRequest {
        domain,
        descriptors,
        hits_addend: 0,
    })
}

/// A request past the bounds: 400 naming the header at fault.
fn input_error(error: EdgeInputError) -> ApiError {
    let header = match error {
        EdgeInputError::Domain => "X-Gate-Domain",
        _ => "X-Gate-Descriptor",
    };
    ApiError::validation(header, error.to_string())
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderName, HeaderValue};

    use super::*;

    fn headers(lines: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in lines {
            map.append(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).expect("a header value"),
            );
        }
        map
    }

    fn entries(request: &EdgeRequest) -> Vec<Vec<(&str, &str)>> {
        request
            .descriptors
            .iter()
            .map(|d| {
                d.entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn descriptors_are_read_in_order_decoded_also_when_folded_into_one_line() {
        let asked = edge_request(&headers(&[
            (DOMAIN_HEADER, "gateway"),
            (DESCRIPTOR_HEADER, "remote_address=10.0.0.1"),
            (
                DESCRIPTOR_HEADER,
                "route=checkout&api_key=a%2Cb%26c%3Dd, route=x+y",
            ),
        ]))
        .expect("parsed");
        assert_eq!(asked.domain, "gateway");
        assert_eq!(
            entries(&asked),
            vec![
                vec![("remote_address", "10.0.0.1")],
                vec![("route", "checkout"), ("api_key", "a,b&c=d")],
                vec![("route", "x y")],
            ]
        );
    }

    #[test]
    fn too_many_descriptors_are_refused_before_more_are_parsed() {
        let many = vec!["k=v"; MAX_DESCRIPTORS + 2].join(",");
        let refused = edge_request(&headers(&[
            (DOMAIN_HEADER, "d"),
            (DESCRIPTOR_HEADER, many.as_str()),
        ]));
        assert_eq!(
            refused.err().map(|e| e.code()),
            Some(crate::vocabulary::ErrorCode::ValidationFailed)
        );
    }

    #[test]
    fn only_the_configured_secret_is_admitted() {
        let secret = GateSecret::new(SecretString::from("a-secret-of-16-bytes"));
        assert!(secret.admits(Some(b"a-secret-of-16-bytes")));
        assert!(!secret.admits(Some(b"a-secret-of-16-byteS")));
        assert!(!secret.admits(Some(b"")));
        assert!(!secret.admits(None));
        assert!(!GateSecret::new(SecretString::from("")).admits(Some(b"")));
    }
}
