//! Builds the application from settings and runs it.
//!
//! In three steps, one file each: `services` connects the stores and builds what the
//! handlers and the background tasks share; `tasks` lists the loops that run beside
//! the server; `server` is the actix server with its middleware and routes. `main.rs`
//! calls [`Application::build`] and [`Application::run_until_stopped`]; the tests build
//! one on port 0.

mod server;
mod services;
mod tasks;

use std::net::{TcpListener, ToSocketAddrs};

use actix_web::dev::{Server, ServerHandle};
use anyhow::Context;
use futures_util::future::BoxFuture;

use crate::configuration::safety;
use crate::configuration::Settings;
use crate::grpc::RlsServer;
pub use services::redis_options;
use services::Services;

/// A bound, not yet running server. Tests build one on port 0 and read [`Self::port`].
pub struct Application {
    port: u16,
    probe_port: u16,
    server: Server,
    /// The probe listener (liveness, readiness, metrics), see `server`.
    probes: Server,
    /// The NGINX gate's listener and its port, when `gate_port` is set.
    gate: Option<(Server, u16)>,
    /// Loops that live exactly as long as the server (the catalog refresh, the
    /// reconciler, …): run beside it and dropped with it, so a stopped application holds
    /// no connection.
    background: BoxFuture<'static, ()>,
    /// The edge domains in force here (`DomainStore::current`), for the engine beside
    /// the server and the tests.
    domains: std::sync::Arc<crate::edge::DomainStore>,
    /// The edge's engine over those domains.
    edge: std::sync::Arc<crate::edge::Edge>,
    /// Envoy's rate-limit gRPC service, when `rls_port` is set: on a runtime of its
    /// own, stopped once the service has.
    rls: Option<RlsServer>,
    /// How long the gRPC server's calls in flight may take to finish at the stop.
    shutdown_timeout: std::time::Duration,
}

impl Application {
    /// Checks the settings, connects to the stores, applies migrations, loads the rules
    /// and the items, and binds the listener.
    pub async fn build(mut settings: Settings) -> anyhow::Result<Self> {
        safety::production(&settings)?;
        safety::timeouts(&settings)?;
        safety::gate(&settings)?;
        settings.settle_policies()?;
        let services = Services::build(&settings).await?;
        let background = tasks::background(&settings, &services);
        let domains = std::sync::Arc::clone(&services.domains);
        let edge = std::sync::Arc::clone(&services.edge);
        let listener = bind(&settings.host, settings.port, settings.listen_backlog)
            .with_context(|| format!("binding {}:{}", settings.host, settings.port))?;
        let port = listener.local_addr()?.port();
        let probe_listener = bind(&settings.host, settings.probe_port, settings.listen_backlog)
            .with_context(|| {
                format!(
                    "binding {}:{} (probe_port)",
                    settings.host, settings.probe_port
                )
            })?;
        let probe_port = probe_listener.local_addr()?.port();
        let rls = match settings.rls_port {
            Some(rls_port) => {
                let listener = bind(&settings.host, rls_port, settings.listen_backlog)
                    .with_context(|| format!("binding {}:{rls_port} (rls_port)", settings.host))?;
                Some(RlsServer::start(
                    listener,
                    std::sync::Arc::clone(&edge),
                    std::sync::Arc::clone(&services.metrics),
                )?)
            }
            None => None,
        };
        let gate_listener = settings
            .gate_port
            .map(|gate_port| {
                bind(&settings.host, gate_port, settings.listen_backlog)
                    .with_context(|| format!("binding {}:{gate_port} (gate_port)", settings.host))
            })
            .transpose()?;
        let gate_port = match &gate_listener {
            Some(listener) => Some(listener.local_addr()?.port()),
            None => None,
        };
        tracing::info!(
            host = %settings.host, port, probe_port, gate_port, environment = ?settings.environment,
            dev_login = settings.dev_login_enabled(),
            admin_endpoints = settings.admin_endpoints_open(),
            "seckill listening"
        );
        let servers = server::start(
            &settings,
            services,
            server::Listeners {
                service: listener,
                probes: probe_listener,
                gate: gate_listener,
            },
        )?;
        Ok(Self {
            port,
            probe_port,
            server: servers.service,
            probes: servers.probes,
            gate: servers.gate.zip(gate_port),
            background,
            domains,
            edge,
            rls,
            shutdown_timeout: std::time::Duration::from_secs(settings.shutdown_timeout_secs),
        })
    }

    /// The edge domains and this instance's copy of them.
    pub fn domains(&self) -> std::sync::Arc<crate::edge::DomainStore> {
        std::sync::Arc::clone(&self.domains)
    }

    /// The edge's engine: what a gateway's request is answered.
    pub fn edge(&self) -> std::sync::Arc<crate::edge::Edge> {
        std::sync::Arc::clone(&self.edge)
    }

    /// The port bound: the one asked for, or the one the OS picked for port 0 (tests).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The rate-limit gRPC service's port, when `rls_port` is set (the OS's pick for 0).
    pub fn rls_port(&self) -> Option<u16> {
        self.rls.as_ref().map(RlsServer::port)
    }

    /// The probe listener's port.
    pub fn probe_port(&self) -> u16 {
        self.probe_port
    }

    /// The NGINX gate's port, when it listens.
    pub fn gate_port(&self) -> Option<u16> {
        self.gate.as_ref().map(|(_, port)| *port)
    }

    /// Stops both servers from elsewhere (tests); SIGTERM and Ctrl-C do the same in the
    /// binary.
    pub fn handle(&self) -> AppHandle {
        AppHandle {
            service: self.server.handle(),
            probes: self.probes.handle(),
            gate: self.gate.as_ref().map(|(gate, _)| gate.handle()),
        }
    }

    /// Serves until a shutdown signal, then drains in-flight requests
    /// (up to `shutdown_timeout_secs`). The probe listener runs beside the service on a
    /// task of its own (a stopping server must be polled to finish stopping), takes no
    /// signal itself, and is stopped once the service has; so is the gRPC server.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let probes = self.probes.handle();
        let probe_server = tokio::spawn(self.probes);
        // The gate, like the probes, takes no signal and stops after the service.
        let gate = self.gate.map(|(gate, _)| {
            let handle = gate.handle();
            (handle, tokio::spawn(gate))
        });
        let stopped = tokio::select! {
            stopped = self.server => stopped,
            () = self.background => Ok(()),
        };
        if let Some((handle, server)) = gate {
            handle.stop(true).await;
            match server.await {
                Ok(Err(e)) => tracing::warn!(error = %e, "the gate stopped with an error"),
                Err(e) => tracing::warn!(error = %e, "the gate's task failed"),
                Ok(Ok(())) => {}
            }
        }
        probes.stop(true).await;
        if let Some(rls) = self.rls {
            rls.stop(self.shutdown_timeout).await;
        }
        match probe_server.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "the probe listener stopped with an error"),
            Err(e) => tracing::warn!(error = %e, "the probe listener's task failed"),
            Ok(Ok(())) => {}
        }
        stopped
    }
}

/// A listener on `host:port` whose accept queue holds `backlog` connections (the kernel
/// caps it at `net.core.somaxconn`). std's own bind asks for 128, which a flood of
/// connects from one address (each refused by the connection guard as it is accepted)
/// overflows: the kernel then drops SYNs, and every client, not only the flooder, waits
/// a second for its retransmission.
fn bind(host: &str, port: u16, backlog: u32) -> anyhow::Result<TcpListener> {
    let address = (host, port)
        .to_socket_addrs()?
        .next()
        .with_context(|| format!("{host} names no address"))?;
    let socket = match address {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    Ok(socket.listen(backlog)?.into_std()?)
}

/// Stops a running [`Application`]'s servers.
#[derive(Clone)]
pub struct AppHandle {
    service: ServerHandle,
    probes: ServerHandle,
    gate: Option<ServerHandle>,
}

impl AppHandle {
    /// Stops accepting and, when `graceful`, lets in-flight requests finish first. The
    /// command is sent at once; the future waits for the servers to have stopped.
    pub fn stop(&self, graceful: bool) -> impl std::future::Future<Output = ()> {
        let service = self.service.stop(graceful);
        let probes = self.probes.stop(graceful);
        let gate = self.gate.as_ref().map(|gate| gate.stop(graceful));
        async move {
            tokio::join!(service, probes);
            if let Some(gate) = gate {
                gate.await;
            }
        }
    }
}
