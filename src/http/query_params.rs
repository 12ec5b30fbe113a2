//! [`QueryParams`]: a handler's query string, parsed with the name of the parameter at
//! fault in the error. actix's own `web::Query` says only "Query deserialize error: …"
//! without the name, and an operator typing a URL deserves to know which part is wrong.

use std::future::{ready, Ready};

use actix_web::{dev::Payload, FromRequest, HttpRequest};
use serde::de::DeserializeOwned;

use super::ApiError;

/// The query string as `T`. A value that does not parse answers 400
/// `VALIDATION_FAILED` with `field` = the parameter's name.
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

impl<T> QueryParams<T> {
    /// The parsed query.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> std::ops::Deref for QueryParams<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: DeserializeOwned> FromRequest for QueryParams<T> {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        ready(parse(req.query_string()).map(QueryParams))
    }
}

fn parse<T: DeserializeOwned>(query: &str) -> Result<T, ApiError> {
    let pairs = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(pairs).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." {
            "query".to_string()
        } else {
            field
        };
        ApiError::validation(
            field.clone(),
            format!("query parameter {field}: {}", e.inner()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Q {
        page: Option<i64>,
        state: Option<String>,
    }

    #[test]
    fn a_bad_value_names_its_parameter() {
        let error = parse::<Q>("state=paid&page=abc").unwrap_err();
        match error {
            ApiError::Validation { field, message } => {
                assert_eq!(field, "page");
                assert!(message.starts_with("query parameter page: "), "{message}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(parse::<Q>("page=2").unwrap().page, Some(2));
    }
}
