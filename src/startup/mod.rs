//! Builds the application from settings and runs it.
//!
//! In three steps, one file each: [`services`] connects the stores and builds what the
//! handlers and the background tasks share; [`tasks`] lists the loops that run beside
//! the server; [`server`] is the actix server with its middleware and routes. `main.rs`
//! calls [`Application::build`] and [`Application::run_until_stopped`]; the tests build
//! one on port 0.

mod server;
mod services;
mod tasks;

use std::net::TcpListener;

use actix_web::dev::{Server, ServerHandle};
use anyhow::Context;
use futures_util::future::BoxFuture;

use crate::configuration::Settings;
pub use services::redis_options;
use services::Services;

/// A bound, not yet running server. Tests build one on port 0 and read [`Self::port`].
pub struct Application {
    port: u16,
    server: Server,
    /// Loops that live exactly as long as the server (the catalog refresh, the
    /// committer, …): run beside it and dropped with it, so a stopped application holds
    /// no connection.
    background: BoxFuture<'static, ()>,
}

impl Application {
    /// Checks the settings, connects to the stores, applies migrations, loads the rules
    /// and the items, and binds the listener.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        settings.check_production_safety()?;
        settings.check_timeouts()?;
        settings.check_policy_scopes()?;
        let (services, commit_queue) = Services::build(&settings).await?;
        let background = tasks::background(&settings, &services, commit_queue);
        let listener = TcpListener::bind((settings.host.as_str(), settings.port))
            .with_context(|| format!("binding {}:{}", settings.host, settings.port))?;
        let port = listener.local_addr()?.port();
        tracing::info!(
            host = %settings.host, port, environment = ?settings.environment,
            dev_login = settings.dev_login_enabled(),
            admin_endpoints = settings.admin_endpoints_open(),
            "seckill listening"
        );
        let server = server::start(&settings, services, listener)?;
        Ok(Self {
            port,
            server,
            background,
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server from elsewhere (tests); SIGTERM and Ctrl-C do the same in the binary.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until a shutdown signal, then drains in-flight requests
    /// (up to `shutdown_timeout_secs`).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        tokio::select! {
            stopped = self.server => stopped,
            () = self.background => Ok(()),
        }
    }
}
