//! The API contract as an OpenAPI 3.1 document, served at `GET /api/openapi.json`.
//!
//! It is derived, not written: each handler carries a `#[utoipa::path]` with what is
//! particular to it (its success, its own refusals), and the types it reads and writes
//! derive their schemas, so a renamed field changes the document too. What every
//! operation of a kind shares is added here by `Shared`, from facts the document
//! already holds, so it is said once: a JSON body can be refused with 400/408/413/415, a
//! path parameter can name nothing (404), an admin route signs its caller in (401, 429
//! after too many failures), a limited route carries the rate-limit headers, and anything
//! can fail with 500. `tests/api/openapi.rs` holds the router against this document in
//! both directions, and `make test` lets schemathesis attack the live API with it.

use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, Ref, RefOr, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::http::routes;
use crate::vocabulary::{ErrorCode, OrderState, Word};

/// Routes behind a limiter policy: their answers carry the rate-limit headers, and they
/// can be refused (429 `RATE_LIMITED`) or find the limiter away (503).
const LIMITED_PATHS: [&str; 3] = ["/seckill", "/api/orders/mine", "/api/limited"];

const SHOPPER: &str = "shopper_jwt";
const OPERATOR: &str = "admin_token";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "seckill",
        description = "Flash-sale backend: a rate-limited purchase endpoint with atomic stock \
            and orders in Postgres, the limiter as a service, and the operators' API. Every \
            error is JSON `{\"code\", \"message\"}` with a stable `code`.",
        license(name = "MIT", identifier = "MIT")
    ),
    paths(
        routes::health::live,
        routes::health::ready,
        routes::metrics::metrics,
        routes::openapi::document,
        routes::session::create,
        routes::session::me,
        routes::items::list,
        routes::seckill::purchase,
        routes::orders::my_orders,
        routes::queue::join,
        routes::queue::poll,
        routes::orders::pay,
        routes::orders::cancel,
        routes::limited::limited,
        routes::admin::me,
        routes::admin::create_item,
        routes::admin::pause,
        routes::admin::resume,
        routes::admin::item_changes::list_items,
        routes::admin::item_changes::edit_item,
        routes::admin::item_changes::end_item,
        routes::admin::item_changes::archive_item,
        routes::admin::item_changes::item_audit,
        routes::admin::queue_settings::waiting_room,
        routes::admin::queue_settings::update_waiting_room,
        routes::admin::orders,
        routes::admin::orders_export::orders_csv,
        routes::admin::history::history,
        routes::admin::history::item_report,
        routes::admin::history::refusal_samples,
        routes::admin::stats,
        routes::admin::stats_series,
        routes::admin::rules::policies,
        routes::admin::rules::policy,
        routes::admin::rules::update_policy,
        routes::admin::rules::audit,
        routes::admin::rls_domains::list_domains,
        routes::admin::rls_domains::domain,
        routes::admin::rls_domains::put_domain,
        routes::admin::rls_domains::delete_domain,
        routes::admin::offenders::offenders,
        routes::admin::offenders::list_blocks,
        routes::admin::offenders::create_block,
        routes::admin::offenders::delete_block,
    ),
    components(schemas(crate::http::api_error::ErrorBody)),
    modifiers(&Shared),
    tags(
        (name = "shopper", description = "The sale as shoppers see it"),
        (name = "limiter", description = "The rate limiter as a service"),
        (name = "admin", description = "Operators: items, orders, live counters, policies"),
        (name = "operations", description = "Health, metrics and this document"),
    )
)]
/// The OpenAPI document, derived from the handlers; served at `/api/openapi.json`.
pub struct ApiDoc;

/// The document this deployment serves: without the development login, its route is
/// left out, as it is from the router.
pub fn document(dev_login: bool) -> Document {
    let mut document = ApiDoc::openapi();
    if !dev_login {
        document.paths.paths.shift_remove("/api/session");
    }
    document
}

/// Adds what operations of a kind share (see the module comment).
struct Shared;

impl Modify for Shared {
    fn modify(&self, document: &mut Document) {
        let components = document.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            SHOPPER,
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some("A shopper's token from `POST /api/session` (local mode) or the identity provider"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            OPERATOR,
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An operator's admin token (`SECKILL_ADMIN_TOKEN`)"))
                    .build(),
            ),
        );
        // The words a client may switch on, as enums: generated clients get types.
        let states: Vec<&str> = OrderState::ALL.iter().map(|s| s.as_str()).collect();
        enumerate(components, "Order", "state", &states);
        let codes: Vec<&str> = ErrorCode::labels().collect();
        enumerate(components, "Error", "code", &codes);
        for (path, item) in document.paths.paths.iter_mut() {
            for operation in [
                &mut item.get,
                &mut item.post,
                &mut item.put,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                share(path, operation);
            }
        }
    }
}

/// Makes `schema`'s string `property` an enum of `words`.
fn enumerate(
    components: &mut utoipa::openapi::Components,
    schema: &str,
    property: &str,
    words: &[&str],
) {
    if let Some(RefOr::T(utoipa::openapi::schema::Schema::Object(object))) =
        components.schemas.get_mut(schema)
    {
        object.properties.insert(
            property.to_string(),
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(words.iter().copied()))
                .build()
                .into(),
        );
    }
}

fn share(path: &str, operation: &mut Operation) {
    if operation.request_body.is_some() {
        add(operation, "400", "`MALFORMED_JSON`: the body is not JSON; `VALIDATION_FAILED`: it is, but a field (`field`) is wrong");
        add(
            operation,
            "408",
            "`REQUEST_TIMEOUT`: the body did not arrive in time",
        );
        add(
            operation,
            "413",
            "`PAYLOAD_TOO_LARGE`: the body is over 16 KiB",
        );
        add(
            operation,
            "415",
            "`UNSUPPORTED_MEDIA_TYPE`: the body is not `application/json`",
        );
    }
    let parameters = operation.parameters.iter().flatten();
    if parameters
        .clone()
        .any(|p| !matches!(p.parameter_in, ParameterIn::Path))
    {
        add(
            operation,
            "400",
            "`VALIDATION_FAILED`: a parameter (`field`) is wrong",
        );
    }
    if path.contains('{') {
        add(operation, "404", "`NOT_FOUND`: the path names nothing");
    }
    if path.starts_with("/admin/api") {
        operation.security = Some(vec![SecurityRequirement::new(OPERATOR, [""; 0])]);
        add(operation, "401", "`UNAUTHENTICATED`: no valid admin token");
        let locked = "`RATE_LIMITED`: too many refused tokens from this address; `retryAfterMs` says when to try again";
        add_with_headers(
            operation,
            "429",
            locked,
            &[("Retry-After", "Seconds to wait")],
        );
        add(
            operation,
            "503",
            "`LIMITER_UNAVAILABLE`: the sign-in lockout cannot be checked",
        );
    }
    if operation
        .security
        .as_ref()
        .is_some_and(|s| s.contains(&SecurityRequirement::new(SHOPPER, [""; 0])))
    {
        add(operation, "401", "`UNAUTHENTICATED`: no valid bearer token");
    }
    if LIMITED_PATHS.contains(&path) {
        let refused = "`RATE_LIMITED`: a rule refused; `dimension` names it and `retryAfterMs` says when it admits again";
        add_with_headers(operation, "429", refused, &REFUSAL_HEADERS);
        add(
            operation,
            "503",
            "`LIMITER_UNAVAILABLE`: Redis cannot be asked and the policy fails closed",
        );
        if let Some(RefOr::T(ok)) = operation.responses.responses.get_mut("200") {
            for (name, description) in QUOTA_HEADERS {
                ok.headers.insert(name.into(), header(description));
            }
        }
    }
    add(
        operation,
        "500",
        "`INTERNAL`: an unexpected failure (the cause is logged, never sent)",
    );
}

/// On every admitted answer of a limited route (none when the limiter failed open,
/// except `X-RateLimit-Policy`; none on an idempotent replay).
const QUOTA_HEADERS: [(&str, &str); 4] = [
    (
        "RateLimit",
        "The tightest rule and what is left of it, e.g. `\"user\";r=2`",
    ),
    (
        "RateLimit-Policy",
        "The policy's rules, e.g. `\"user\";q=3;w=60`",
    ),
    (
        "X-RateLimit-Policy",
        "The algorithm that decided: `sliding_window` or `token_bucket`",
    ),
    (
        "X-RateLimit-Remaining",
        "Requests left under the tightest rule",
    ),
];

/// On a refusal by a rule.
const REFUSAL_HEADERS: [(&str, &str); 6] = [
    (
        "Retry-After",
        "Seconds until every refusing rule admits again",
    ),
    ("Retry-After-Ms", "The same in milliseconds"),
    (
        "RateLimit",
        "The refusing rule, `r=0` and its own wait, e.g. `\"user\";r=0;t=42`",
    ),
    ("RateLimit-Policy", "The policy's rules"),
    ("X-RateLimit-Policy", "The algorithm that decided"),
    ("X-RateLimit-Remaining", "Always 0"),
];

fn header(description: &str) -> utoipa::openapi::header::Header {
    HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::String))
        .description(Some(description))
        .build()
}

fn add(operation: &mut Operation, status: &str, description: &str) {
    add_with_headers(operation, status, description, &[]);
}

/// Adds an error answer; a status the handler documents already keeps its body and
/// gains the shared reason in its description.
fn add_with_headers(
    operation: &mut Operation,
    status: &str,
    description: &str,
    headers: &[(&str, &str)],
) {
    let responses = &mut operation.responses.responses;
    let response = responses
        .entry(status.to_string())
        .or_insert_with(|| RefOr::T(error_response()));
    if let RefOr::T(response) = response {
        if response.content.is_empty() {
            response.content = error_response().content;
        }
        if response.description.is_empty() {
            response.description = description.to_string();
        } else if !response.description.contains(description) {
            response.description = format!("{}; {description}", response.description);
        }
        for (name, about) in headers {
            response.headers.insert((*name).into(), header(about));
        }
    }
}

fn error_response() -> Response {
    ResponseBuilder::new()
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Error")))
                .build(),
        )
        .build()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::http::routes::{configure, Operation, RouteOptions};

    /// What the router serves, from `routes::configure` itself.
    fn served(dev_login: bool) -> BTreeSet<Operation> {
        let mut served = Vec::new();
        let options = RouteOptions {
            dev_login,
            static_dir: "static".into(),
        };
        let _app = actix_web::App::new().configure(|cfg| served = configure(cfg, options));
        served.into_iter().collect()
    }

    fn documented(dev_login: bool) -> BTreeSet<Operation> {
        let document = serde_json::to_value(document(dev_login)).expect("serializes");
        let paths = document["paths"].as_object().expect("paths");
        paths
            .iter()
            .flat_map(|(path, item)| {
                let methods = item.as_object().expect("a path item").keys();
                methods.map(|method| Operation {
                    method: method.clone(),
                    path: path.clone(),
                })
            })
            .collect()
    }

    /// Every `$ref` of `value`.
    fn refs<'a>(value: &'a serde_json::Value, out: &mut Vec<&'a str>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, v) in map {
                    match (key.as_str(), v) {
                        ("$ref", serde_json::Value::String(to)) => out.push(to),
                        _ => refs(v, out),
                    }
                }
            }
            serde_json::Value::Array(values) => values.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_schema_the_document_refers_to_is_in_it() {
        // A query parameter's enum is referred to but not collected unless inlined: the
        // document then failed schemathesis's validator (`Format` does not exist).
        let document = serde_json::to_value(document(true)).unwrap();
        let schemas = &document["components"]["schemas"];
        let mut found = Vec::new();
        refs(&document, &mut found);
        let dangling: Vec<_> = found
            .into_iter()
            .filter(|to| {
                let name = to.trim_start_matches("#/components/schemas/");
                schemas.get(name).is_none()
            })
            .collect();
        assert!(dangling.is_empty(), "refers to no schema: {dangling:?}");
    }

    #[test]
    fn the_document_lists_exactly_the_routes_the_router_serves() {
        for dev_login in [true, false] {
            let served = served(dev_login);
            let documented = documented(dev_login);
            let undocumented: Vec<_> = served.difference(&documented).collect();
            let unserved: Vec<_> = documented.difference(&served).collect();
            assert!(
                undocumented.is_empty(),
                "served but not in the document: {undocumented:?}"
            );
            assert!(
                unserved.is_empty(),
                "in the document but not served: {unserved:?}"
            );
        }
        assert_eq!(
            served(true).len(),
            44,
            "every operation, the dev login included"
        );
        assert!(!served(false).iter().any(|o| o.path == "/api/session"));
    }
}
