//! Connections before HTTP: how many one client address may hold open, and how long a
//! request head may take to arrive on one.
//!
//! The per-worker cap on open connections (`max_connections`) is what bounds resident
//! memory, and actix's own request-head deadline covers only a connection's first
//! request. Together they let one client starve everyone (a slowloris): open thousands
//! of connections, send each a partial head a byte at a time, reopen as they close, and
//! every slot is held while nobody else gets one. Two guards close that:
//!
//! - [`AddressSlots`]: at most `max_connections_per_address` open connections per client
//!   address, counted over every worker and checked as a connection is accepted; one over
//!   it is closed at once. An IPv6 client counts by its /64 (what one subscriber is
//!   given). Trusted proxies are exempt: they carry many clients, and their own limits
//!   apply (the shipped nginx configuration sets `limit_conn` and header timeouts).
//! - [`Guarded`]: the connection's stream, which ends the connection when a request head
//!   has not fully arrived within `head_timeout_ms` of the connection opening or of the
//!   previous answer, however it trickles in (total time, not time between bytes). The
//!   [`mark_heads`] middleware tells it when a head has arrived and when the answer is
//!   out. An idle keep-alive connection ends after the same time. A head still incomplete
//!   after [`PACED_AFTER`] reads is read at most once per [`PACE`]: thousands of heads
//!   trickled a byte at a time cost the workers a wake-up per byte otherwise, which
//!   slowed everyone else's requests (docs/soak.md, "Slowloris").
//!
//! - [`HeadBudget`] (`max_connections_awaiting_head`): many addresses at once, each under
//!   its share, would fill the cap; the connections waiting for a head have a budget
//!   below it, and a newcomer that finds it full closes the one that has waited longest.
//!
//! And whatever gets through, liveness, readiness and the metrics are also served on a
//! listener of their own (`probe_port`, see `startup::server`), with its own connections.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::head_budget::{HeadBudget, Wait};
use crate::metrics::Metrics;
use crate::vocabulary::ConnectionCut;

/// Reads of a head that has not arrived yet before the rest is read at [`PACE`]: an
/// honest client's head comes in one or two segments.
pub const PACED_AFTER: u32 = 4;
/// Then one read per this, whatever the client sends (the kernel keeps the bytes).
pub const PACE: Duration = Duration::from_secs(1);

/// How connections are held to account (settings `max_connections_per_address`,
/// `head_timeout_ms`, `trusted_proxies`).
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    /// Most connections one address may hold open at once (`max_connections_per_address`).
    pub per_address: u32,
    /// Longest a request head may take to arrive (`head_timeout_ms`).
    pub head_timeout: Duration,
    /// Addresses exempt from `per_address`: the trusted proxies.
    pub exempt: Vec<IpAddr>,
}

/// Open connections per client address, shared by every worker of a listener.
pub struct AddressSlots {
    limits: ConnectionLimits,
    open: Mutex<HashMap<IpAddr, u32>>,
    metrics: Arc<Metrics>,
}

/// One open connection's place in its address's count, given back when it closes.
pub struct Slot {
    slots: Arc<AddressSlots>,
    address: IpAddr,
}

impl AddressSlots {
    /// The counts, empty, under `limits`; cuts are counted on `metrics`.
    pub fn new(limits: ConnectionLimits, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Self {
            limits,
            open: Mutex::new(HashMap::new()),
            metrics,
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &ConnectionLimits {
        &self.limits
    }

    /// A place for a connection from `peer`: `Some(None)` for an exempt peer (nothing is
    /// counted), `None` when its address holds `per_address` connections already.
    pub fn admit(self: &Arc<Self>, peer: Option<SocketAddr>) -> Option<Option<Slot>> {
        let Some(peer) = peer else {
            return Some(None);
        };
        if self.limits.exempt.contains(&peer.ip()) {
            return Some(None);
        }
        let address = client_address(peer.ip());
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(address).or_insert(0);
        if *count >= self.limits.per_address {
            drop(open);
            self.cut(ConnectionCut::PerAddress);
            return None;
        }
        *count += 1;
        Some(Some(Slot {
            slots: Arc::clone(self),
            address,
        }))
    }

    fn cut(&self, reason: ConnectionCut) {
        self.metrics
            .connections_cut
            .with_label_values(&[reason.label()])
            .inc();
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// The address a client's connections are counted under: IPv4 as it is, IPv6 by its /64
/// (an IPv4-mapped one as IPv4).
fn client_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

/// Where a connection is between requests: waiting for a head (until a deadline, in the
/// listener's [`HeadBudget`]) or serving one. Shared by the connection's stream and,
/// through the connection's data, the [`mark_heads`] middleware; both run on the
/// connection's worker thread.
pub struct HeadClock {
    timeout: Duration,
    awaiting_until: Cell<Option<Instant>>,
    /// Reads that brought bytes while it waited for this head.
    reads: Cell<u32>,
    budget: Arc<HeadBudget>,
    /// Its place in the budget while it waits for a head.
    wait: RefCell<Option<Wait>>,
    /// The connection's task, as its stream last saw it: a wait that starts after an
    /// answer (keep-alive) is woken through it if the budget cuts it before the next read.
    waker: RefCell<Option<std::task::Waker>>,
}

impl HeadClock {
    fn new(timeout: Duration, budget: Arc<HeadBudget>) -> Rc<Self> {
        Rc::new(Self {
            timeout,
            awaiting_until: Cell::new(Some(Instant::now() + timeout)),
            reads: Cell::new(0),
            wait: RefCell::new(Some(budget.wait())),
            budget,
            waker: RefCell::new(None),
        })
    }

    fn head_arrived(&self) {
        self.awaiting_until.set(None);
        self.reads.set(0);
        self.wait.replace(None);
    }

    fn answered(&self) {
        self.awaiting_until.set(Some(Instant::now() + self.timeout));
        self.reads.set(0);
        let wait = self.budget.wait();
        if let Some(waker) = self.waker.borrow().as_ref() {
            wait.wake_on_cut(waker);
        }
        self.wait.replace(Some(wait));
    }

    /// Whether the budget closed the connection while it waited for a head.
    fn is_cut(&self, waker: &std::task::Waker) -> bool {
        let mut seen = self.waker.borrow_mut();
        if !seen.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *seen = Some(waker.clone());
        }
        drop(seen);
        self.wait
            .borrow()
            .as_ref()
            .is_some_and(|wait| wait.is_cut(waker))
    }
}

/// A connection's stream under the head deadline and budget, holding its address's
/// [`Slot`].
pub struct Guarded<T> {
    inner: T,
    clock: Rc<HeadClock>,
    timer: Pin<Box<Sleep>>,
    /// When a trickling head may be read next (see [`PACED_AFTER`]).
    pace: Option<Pin<Box<Sleep>>>,
    /// Set once the deadline has ended the connection (counted once).
    expired: bool,
    slots: Arc<AddressSlots>,
    _slot: Option<Slot>,
}

impl<T> Guarded<T> {
    /// `inner` under the head deadline, pacing and budget, holding `slot` (if its address
    /// is counted).
    pub fn new(
        inner: T,
        slot: Option<Slot>,
        slots: Arc<AddressSlots>,
        budget: &Arc<HeadBudget>,
    ) -> Self {
        let clock = HeadClock::new(slots.limits.head_timeout, Arc::clone(budget));
        let first = clock.awaiting_until.get().unwrap_or_else(Instant::now);
        Self {
            inner,
            clock,
            timer: Box::pin(tokio::time::sleep_until(first)),
            pace: None,
            expired: false,
            slots,
            _slot: slot,
        }
    }

    /// The clock [`mark_heads`] finds in the connection's data.
    pub fn clock(&self) -> Rc<HeadClock> {
        Rc::clone(&self.clock)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(deadline) = this.clock.awaiting_until.get() {
            if this.timer.deadline() != deadline {
                this.timer.as_mut().reset(deadline);
            }
            // The budget counts its own cuts.
            if !this.expired && this.clock.is_cut(cx.waker()) {
                this.expired = true;
            }
            if this.expired || this.timer.as_mut().poll(cx).is_ready() {
                if !this.expired {
                    this.expired = true;
                    this.slots.cut(ConnectionCut::HeadTimeout);
                }
                // End of stream: the dispatcher closes the connection.
                return Poll::Ready(Ok(()));
            }
            if this.clock.reads.get() >= PACED_AFTER {
                let pace = this
                    .pace
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::ZERO)));
                if pace.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                pace.as_mut().reset(Instant::now() + PACE);
            }
            let before = buf.filled().len();
            let read = Pin::new(&mut this.inner).poll_read(cx, buf);
            if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
                this.clock.reads.set(this.clock.reads.get() + 1);
            }
            return read;
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Tells the connection's [`HeadClock`] that a head has arrived (no deadline while it is
/// served) and, once the answer is out, that the next head's deadline starts.
pub async fn mark_heads(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let clock = request.conn_data::<Rc<HeadClock>>().cloned();
    if let Some(clock) = &clock {
        clock.head_arrived();
    }
    let answer = next.call(request).await;
    if let Some(clock) = clock {
        clock.answered();
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_clients_count_by_their_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(client_address(a), client_address(b));
        assert_ne!(client_address(a), client_address(c));
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert_eq!(
            client_address(mapped),
            "10.1.2.3".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn an_address_gets_its_cap_of_slots_and_each_closed_one_back() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let slots = AddressSlots::new(
            ConnectionLimits {
                per_address: 2,
                head_timeout: Duration::from_secs(1),
                exempt: vec!["127.0.0.1".parse().unwrap()],
            },
            metrics,
        );
        let client: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let first = slots.admit(Some(client)).unwrap();
        let second = slots.admit(Some(client)).unwrap();
        assert!(slots.admit(Some(client)).is_none(), "a third is refused");
        let other: SocketAddr = "10.0.0.2:4000".parse().unwrap();
        assert!(slots.admit(Some(other)).is_some(), "another address is not");
        drop(first);
        assert!(
            slots.admit(Some(client)).is_some(),
            "a closed one frees a slot"
        );
        drop(second);
        let proxy: SocketAddr = "127.0.0.1:4000".parse().unwrap();
        let held: Vec<_> = (0..10).map(|_| slots.admit(Some(proxy)).unwrap()).collect();
        assert!(
            held.iter().all(Option::is_none),
            "a trusted proxy is not counted"
        );
    }
}
