//! Logging setup. Every request runs inside a `tracing-actix-web` span carrying its
//! `request_id`, so each log line of a request can be found by that id.

use tracing_subscriber::{fmt, EnvFilter};

use crate::configuration::{LogFormat, Settings};

/// Installs the global subscriber. `RUST_LOG`, when set, wins over the settings.
/// Calling it twice is harmless (tests start many apps in one process).
pub fn init(settings: &Settings) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.log_level));
    let builder = fmt().with_env_filter(filter).with_target(true);
    let _already_set = match settings.log_format() {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}
