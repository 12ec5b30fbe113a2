//! Logging setup. At `debug`, every request runs inside a `tracing-actix-web` span
//! carrying its `request_id`, and a purchase's steps (`limiter.check`, `reservation`,
//! `pipeline`, `commit`) inside spans of their own; each span writes one line when it
//! closes, with its fields (the item, the outcome) and its `time.busy` / `time.idle`, so
//! a slow purchase can be read step by step from the log. Below `debug` those spans are
//! disabled and cost a level check.

use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::{fmt, EnvFilter};

use crate::configuration::{LogFormat, Settings};

/// Installs the global subscriber. `RUST_LOG`, when set, wins over the settings.
/// Calling it twice is harmless (tests start many apps in one process).
pub fn init(settings: &Settings) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.log_level));
    let builder = fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_span_events(FmtSpan::CLOSE);
    let _already_set = match settings.log_format() {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}
