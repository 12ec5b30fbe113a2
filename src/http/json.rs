//! `JsonBody<T>`: the one way handlers read a JSON body.
//!
//! actix's own `Json` cannot tell a client *which* field was wrong, and the envelope must
//! be ours for every failure, so this extractor owns the whole edge:
//! content type (415), size limit (413), syntax (400 `MALFORMED_JSON`), types and
//! `validator` rules (400 `VALIDATION_FAILED` with the field, in the client's camelCase).

use actix_web::dev::Payload;
use actix_web::http::header::CONTENT_LENGTH;
use actix_web::web::BytesMut;
use actix_web::{FromRequest, HttpMessage, HttpRequest};
use futures_util::future::LocalBoxFuture;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::error::Category;
use validator::Validate;

use crate::http::ApiError;

/// Largest JSON body accepted. Every body we take is a handful of fields.
pub const JSON_LIMIT_BYTES: usize = 16 * 1024;

/// How long a body may take to arrive (`body_timeout_ms`), as app data; 5 s when unset.
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub std::time::Duration);

impl Default for BodyTimeout {
    fn default() -> Self {
        Self(std::time::Duration::from_secs(5))
    }
}

/// A JSON body as `T`, parsed and validated, with our error envelope on every failure (see
/// the module docs).
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T> FromRequest for JsonBody<T>
where
    T: DeserializeOwned + Validate + 'static,
{
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let is_json = matches!(req.mime_type(), Ok(Some(m))
            if m.subtype() == actix_web::mime::JSON || m.suffix() == Some(actix_web::mime::JSON));
        let declared_len = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let mut payload = payload.take();
        // actix bounds the wait for the headers, not for the body: a client announcing
        // 16 KiB and sending a byte now and then would hold this request for hours.
        let deadline = req
            .app_data::<actix_web::web::Data<BodyTimeout>>()
            .map(|timeout| *timeout.get_ref())
            .unwrap_or_default()
            .0;
        Box::pin(async move {
            if !is_json {
                return Err(ApiError::UnsupportedMediaType);
            }
            let too_large = ApiError::PayloadTooLarge {
                limit: JSON_LIMIT_BYTES,
            };
            if declared_len.is_some_and(|len| len > JSON_LIMIT_BYTES) {
                return Err(too_large);
            }
            let read = async {
                let mut body = BytesMut::with_capacity(declared_len.unwrap_or(0));
                while let Some(chunk) = payload.next().await {
                    let chunk = chunk.map_err(|e| {
                        ApiError::MalformedJson(format!("could not read the body: {e}"))
                    })?;
                    if body.len() + chunk.len() > JSON_LIMIT_BYTES {
                        return Err(too_large);
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(body)
            };
            let body = tokio::time::timeout(deadline, read)
                .await
                .map_err(|_| ApiError::RequestTimeout)??;
            let value: T = parse(&body)?;
            value.validate().map_err(first_violation)?;
            Ok(JsonBody(value))
        })
    }
}

/// Deserialises, telling syntax errors (the client sent broken JSON) from data errors
/// (well-formed JSON with a wrong or missing field).
fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        match inner.classify() {
            Category::Data => {
                let field = missing_field(&inner.to_string()).unwrap_or(path);
                ApiError::validation(field, inner.to_string())
            }
            Category::Syntax | Category::Eof | Category::Io => {
                ApiError::MalformedJson(inner.to_string())
            }
        }
    })?;
    de.end()
        .map_err(|e| ApiError::MalformedJson(e.to_string()))?;
    Ok(value)
}

/// serde reports a missing field at its parent's path; the name is in the message.
fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// Reports one violation, the first by field name, so the answer is deterministic.
fn first_violation(errors: validator::ValidationErrors) -> ApiError {
    let field_errors = errors.field_errors();
    let Some((field, errs)) = field_errors.iter().min_by(|a, b| a.0.cmp(b.0)) else {
        return ApiError::validation("", "invalid request");
    };
    let message = errs
        .first()
        .and_then(|e| e.message.as_ref().map(|m| m.to_string()))
        .unwrap_or_else(|| "invalid value".into());
    ApiError::validation(camel_case(field), message)
}

/// DTO fields are snake_case in Rust and camelCase on the wire.
fn camel_case(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut upper = false;
    for c in field.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, Validate)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        #[validate(range(min = 1, message = "must be positive"))]
        user_id: i64,
    }

    #[test]
    fn tells_syntax_from_data_errors() {
        assert!(matches!(
            parse::<Probe>(b"{\"userId\": "),
            Err(ApiError::MalformedJson(_))
        ));
        assert!(matches!(
            parse::<Probe>(b"{\"userId\": 1} x"),
            Err(ApiError::MalformedJson(_))
        ));
        let Err(ApiError::Validation { field, .. }) = parse::<Probe>(b"{\"userId\": \"x\"}") else {
            panic!("a wrong type is a validation error");
        };
        assert_eq!(field, "userId");
        let Err(ApiError::Validation { field, .. }) = parse::<Probe>(b"{}") else {
            panic!("a missing field is a validation error");
        };
        assert_eq!(field, "userId");
    }

    #[test]
    fn validator_fields_come_back_in_camel_case() {
        let probe: Probe = parse(b"{\"userId\": 0}").unwrap();
        let Err(ApiError::Validation { field, message }) =
            probe.validate().map_err(first_violation)
        else {
            panic!("zero is not a positive user id");
        };
        assert_eq!(
            (field.as_str(), message.as_str()),
            ("userId", "must be positive")
        );
    }
}
