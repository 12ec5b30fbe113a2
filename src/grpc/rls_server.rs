//! The rate-limit service's own runtime and listener. A gateway asks once per request it
//! proxies: on the HTTP service's actix workers those calls would queue behind the
//! shoppers' (and theirs behind them). So the gRPC server runs on a tokio runtime of its
//! own, on an OS thread of its own, with [`WORKER_THREADS`] workers; the Redis store
//! keeps one connection per thread, so those workers add [`WORKER_THREADS`] Redis
//! connections to the instance's. It stops with the application ([`RlsServer::stop`]).
//!
//! Bounded: a message at most [`MAX_MESSAGE_BYTES`] (a larger one is refused before it
//! is decoded), [`MAX_STREAMS_PER_CONNECTION`] calls at once per connection,
//! [`MAX_IN_FLIGHT`] decisions at once in all, each call at most [`CALL_TIMEOUT`]
//! (a body that stalls half sent included), headers at most [`MAX_HEADER_BYTES`].
//! A malformed frame fails its call only.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Server;

use super::RateLimitGrpc;
use crate::edge::Edge;
use crate::metrics::Metrics;

/// The runtime's worker threads: the decisions are Redis round trips, so two keep a
/// core's worth of them in flight without taking the instance's cores from the shoppers.
pub const WORKER_THREADS: usize = 2;
/// Largest `RateLimitRequest` decoded: 16 descriptors of 8 entries of 2 × 256 bytes
/// with their framing fit with room to spare.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// Calls at once on one HTTP/2 connection (Envoy multiplexes on a few connections).
pub const MAX_STREAMS_PER_CONNECTION: u32 = 256;
/// Decisions in flight over every connection; one more is `RESOURCE_EXHAUSTED`.
pub const MAX_IN_FLIGHT: usize = 1_024;
/// Longest a call may take, its request's body included: well past the limiter's own
/// timeout, so only a stalled client reaches it (`CANCELLED`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest header list a call may send.
pub const MAX_HEADER_BYTES: u32 = 16 * 1024;

/// The running server.
pub struct RlsServer {
    port: u16,
    /// Sent (or dropped): stop accepting, finish the calls in flight, end the runtime.
    stop: oneshot::Sender<()>,
    /// Resolves once the runtime has ended.
    stopped: oneshot::Receiver<()>,
}

impl RlsServer {
    /// Serves `edge` on `listener` (bound by the caller, so a taken port fails the start)
    /// on a runtime of its own.
    pub fn start(
        listener: std::net::TcpListener,
        edge: Arc<Edge>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Self> {
        let port = listener.local_addr()?.port();
        listener.set_nonblocking(true)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("rls-grpc-worker")
            .enable_all()
            .build()
            .context("building the gRPC server's runtime")?;
        let service = RateLimitServiceServer::new(RateLimitGrpc::new(edge, metrics, MAX_IN_FLIGHT))
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let (stop, stop_received) = oneshot::channel::<()>();
        let (ended, stopped) = oneshot::channel();
        std::thread::Builder::new()
            .name("rls-grpc".into())
            .spawn(move || {
                let served = runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    Server::builder()
                        .timeout(CALL_TIMEOUT)
                        .max_concurrent_streams(MAX_STREAMS_PER_CONNECTION)
                        .concurrency_limit_per_connection(MAX_STREAMS_PER_CONNECTION as usize)
                        .http2_max_header_list_size(MAX_HEADER_BYTES)
                        .http2_keepalive_interval(Some(Duration::from_secs(30)))
                        .serve_with_incoming_shutdown(
                            service,
                            TcpIncoming::from(listener).with_nodelay(Some(true)),
                            async {
                                let _ = stop_received.await;
                            },
                        )
                        .await?;
                    anyhow::Ok(())
                });
                if let Err(e) = served {
                    tracing::error!(error = %e, "the rate-limit gRPC server failed");
                }
                drop(runtime);
                let _ = ended.send(());
            })
            .context("starting the gRPC server's thread")?;
        tracing::info!(port, "rate-limit gRPC service listening");
        Ok(Self {
            port,
            stop,
            stopped,
        })
    }

    /// The port bound (the OS's pick for port 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops accepting and waits, at most `grace`, for the calls in flight and the
    /// runtime to end (a gateway's idle connection is told to go away, not waited for).
    pub async fn stop(self, grace: Duration) {
        let _ = self.stop.send(());
        if tokio::time::timeout(grace, self.stopped).await.is_err() {
            tracing::warn!(?grace, "the rate-limit gRPC server did not stop in time");
        }
    }
}
