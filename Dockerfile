# seckill container image: build in the full Rust image, run in a slim Debian.
#
#   docker build -t seckill:local .          (docker-compose.yml does this for you)
#
# Plain Dockerfile syntax (no BuildKit-only features), so Compose 1.29's classic
# builder can build it too.

# ---- build ------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /src

# sqlx's query macros read the committed .sqlx/ cache instead of asking a database,
# which the build has none of. (.cargo/config.toml says so too; this makes it explicit.)
ENV SQLX_OFFLINE=true \
    CARGO_TERM_COLOR=never

# 1. Dependencies first, against stub sources: this layer is rebuilt only when a
#    manifest or the lock file changes, not on every source edit. Every workspace
#    member's manifest must be present because the root manifest names them; only
#    seckill's sources are built, the others stay stubs.
COPY Cargo.toml Cargo.lock ./
COPY .cargo .cargo
COPY loadtest/core/Cargo.toml loadtest/core/Cargo.toml
COPY loadtest/loadgen/Cargo.toml loadtest/loadgen/Cargo.toml
COPY loadtest/queue-bench/Cargo.toml loadtest/queue-bench/Cargo.toml
COPY loadtest/slowloris/Cargo.toml loadtest/slowloris/Cargo.toml
COPY loadtest/trace/Cargo.toml loadtest/trace/Cargo.toml
COPY loadtest/ceiling/Cargo.toml loadtest/ceiling/Cargo.toml
COPY tests/support/Cargo.toml tests/support/Cargo.toml
RUN mkdir -p src tests/support/src \
 && for tool in loadgen queue-bench slowloris trace ceiling; do \
      mkdir -p loadtest/$tool/src && echo 'fn main() {}' > loadtest/$tool/src/main.rs; \
    done \
 && mkdir -p loadtest/core/src \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs loadtest/core/src/lib.rs loadtest/loadgen/src/lib.rs \
    loadtest/queue-bench/src/lib.rs loadtest/slowloris/src/lib.rs loadtest/trace/src/lib.rs \
    tests/support/src/lib.rs \
 && cargo build --release --locked --bin seckill \
 && rm -rf src loadtest/core/src loadtest/loadgen/src

# The commit `seckill_build_info` names: `docker build --build-arg SECKILL_COMMIT=$(git
# rev-parse --short HEAD)`.
ARG SECKILL_COMMIT=unknown
ENV SECKILL_COMMIT=$SECKILL_COMMIT
# 2. The real sources. migrations/ and lua/ are compiled into the binary
#    (sqlx::migrate!, include_str!), so the runtime image needs neither.
COPY .sqlx .sqlx
COPY migrations migrations
COPY lua lua
COPY src src
COPY loadtest/core/src loadtest/core/src
COPY loadtest/loadgen/src loadtest/loadgen/src
# COPY keeps the files' own modification times, which may be older than the stub
# build above; touch them so cargo rebuilds our crates instead of keeping the stubs.
RUN touch src/main.rs src/lib.rs loadtest/core/src/lib.rs loadtest/loadgen/src/main.rs \
    loadtest/loadgen/src/lib.rs \
 && cargo build --release --locked --bin seckill \
 && cp target/release/seckill /usr/local/bin/seckill

# ---- run --------------------------------------------------------------------------
FROM debian:bookworm-slim

# ca-certificates: TLS to managed Redis/Postgres if configured. curl: the health check.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*

# A fixed, unprivileged uid/gid: the process needs no file it does not own and binds
# an unprivileged port.
RUN groupadd --system --gid 10001 seckill \
 && useradd --system --uid 10001 --gid seckill --home-dir /app --shell /usr/sbin/nologin seckill \
 && mkdir -p /app && chown seckill:seckill /app

COPY --from=builder /usr/local/bin/seckill /usr/local/bin/seckill
# The shopper page and admin dashboard, served from disk at `/` (the `static_dir`
# setting, `static` relative to the working directory). Owned by root: the app reads
# them and cannot change them.
COPY static /app/static

WORKDIR /app
USER 10001:10001

# Listen on every interface inside the container (the app's own default is loopback,
# which would be unreachable from outside it). Production by default: the app then
# refuses to start with the public development secrets.
ENV SECKILL_HOST=0.0.0.0 \
    SECKILL_PORT=8080 \
    SECKILL_PROBE_PORT=8089 \
    SECKILL_ENVIRONMENT=production

# 8080: the service. 8089: the probe listener (liveness, readiness, metrics), answered
# on connections of its own even while the service's are all taken.
EXPOSE 8080 8089

# Liveness (the process serves), on the probe listener. Readiness (/health/ready)
# depends on Redis and Postgres and is for load balancers, not for restarting this
# container.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD curl -fsS -o /dev/null "http://127.0.0.1:${SECKILL_PROBE_PORT}/health/live" || exit 1

# The binary is PID 1 and handles SIGTERM itself (graceful shutdown).
CMD ["seckill"]
