//! What a run is asked to do: the targets, the item, the users and their addresses, the
//! load, the limits the checks hold the service to, and where its stores are.

use std::time::Duration;

pub use loadtest_core::stores::Stores;

/// One limit the checker expects the service to enforce.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    pub count: u64,
    pub window: Duration,
}

/// The limits a run holds the purchases to, by dimension: what the caller gives of
/// each (a test planting a breach, a bench run raising them out of the way), the rest
/// read from the `seckill` policy the service runs (see `limits`). The default gives
/// nothing: every limit is the service's own, so loadgen never copies the defaults.
#[derive(Debug, Clone, Default)]
pub struct Limits {
    pub user: LimitParts,
    pub ip: LimitParts,
    pub api: LimitParts,
}

/// A limit's parts as given; each one not given is read from the policy's rule.
#[derive(Debug, Clone, Copy, Default)]
pub struct LimitParts {
    pub count: Option<u64>,
    pub window: Option<Duration>,
}

impl From<Limit> for LimitParts {
    fn from(limit: Limit) -> Self {
        Self {
            count: Some(limit.count),
            window: Some(limit.window),
        }
    }
}

#[derive(Debug, Clone)]
pub enum Load {
    /// Open model: this many requests per second, whatever the answers take.
    Rate(f64),
    /// Closed model: this many requests in flight at all times.
    Concurrency(usize),
}

#[derive(Debug, Clone)]
pub enum ItemChoice {
    Existing(i64),
    /// Create a fresh item with this stock through the admin API.
    Create {
        stock: i64,
    },
}

#[derive(Debug, Clone)]
pub struct Config {
    /// Base URLs, e.g. `http://127.0.0.1:8080`; requests go round-robin.
    pub targets: Vec<String>,
    pub item: ItemChoice,
    pub users: u32,
    /// User ids are `first_user .. first_user + users`.
    pub first_user: i64,
    /// Distinct client addresses (sent as `X-Forwarded-For`); user `i` uses address
    /// `i % ips`.
    pub ips: u32,
    pub load: Load,
    pub duration: Duration,
    pub max_requests: Option<u64>,
    pub limits: Limits,
    /// For the admin API: the item's creation, the policies' reads (the limits not
    /// given, the side load's rules).
    pub admin_token: String,
    pub stores: Option<Stores>,
    pub progress: bool,
    /// Instead of purchases, GET this path (a baseline: the constant route, the bare
    /// limiter). No item, no tokens, no checks.
    pub probe: Option<String>,
}

/// Knobs added after [`Config`], kept apart so that existing struct literals of it still
/// compile. [`run`](crate::run) uses the defaults.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Fetch dev-login tokens from this base URL instead of the first target: lets a
    /// target that issues no tokens (the bench's ceiling server) be driven with tokens
    /// from an app instance sharing its JWT secret.
    pub session_target: Option<String>,
    /// Create this (empty) file when the measured phase begins, after the logins and
    /// the listing wait, so a caller can sample the servers over exactly that phase.
    pub started_file: Option<std::path::PathBuf>,
    /// POST purchases to this path instead of `/seckill` (the ceiling's `/constant`).
    pub purchase_path: Option<String>,
    /// Open model only: at most this many requests in flight. A send that falls due
    /// while the cap is reached is dropped and counted (`RunReport::dropped`), so an
    /// overloaded server sees bounded concurrency instead of a pile of new connections.
    pub max_in_flight: Option<usize>,
    /// Client addresses are `first_ip .. first_ip + ips` (as indices, see `ip_of`), so
    /// that consecutive runs against one instance can each use addresses no earlier run
    /// used (the ip limit's window outlasts a run).
    pub first_ip: u32,
    /// Spread the purchases over this many fresh items (each created with the
    /// configured stock; with an existing item, ignored): user `i` buys item `i % sales`,
    /// so many sales run at once. 0 and 1 mean one item. The report and the store
    /// checks are about the first item.
    pub sales: u32,
    /// Cut the report along the named windows this file lists once the load is over
    /// (see `phases`): a fault injector writes it while the load runs.
    pub phases_file: Option<std::path::PathBuf>,
    /// Before the store checks, wait (at most this long) for nothing to be pending and
    /// then for a whole reconciler round: after faults, Redis is judged as the
    /// reconciler leaves it.
    pub await_reconciliation: Option<Duration>,
    /// Beside the purchases, a few keys of the policies that limit in process while
    /// Redis is away, each at a fixed rate (see `side`); their limits are checked too.
    pub side: Option<SideLoad>,
    /// The Redis outages a fault injector writes down while the load runs (see
    /// `outages`): the checks judge the windows around them by the bounds that hold
    /// there.
    pub outages_file: Option<std::path::PathBuf>,
    /// Sample these metric families (name prefixes) from every target's `/metrics`...
    pub sample_metrics: Vec<String>,
    /// ...this often, while the load runs.
    pub sample_every: Duration,
    /// Room mode (see `room`): the item's waiting room on, shoppers who join it, poll it
    /// and buy with their pass, beside the load's purchases without one.
    pub room: Option<RoomPlan>,
}

/// Room mode: the run turns the item's waiting room on (`fifo`, no pre-queue) before the
/// load, and sends `shoppers` through it while the load's users keep firing
/// `POST /seckill` without a pass (each answered 403 `NOT_ADMITTED` past the limiter, or
/// refused by it). Shoppers are users of their own, after the load's (and the side
/// load's readers), each behind an address of its own after the load's (and the side
/// load's); they run until they bought, the room says sold out, expired or closed, or
/// the run's duration is over.
#[derive(Debug, Clone)]
pub struct RoomPlan {
    pub shoppers: u32,
    /// The room's `admitPerSecond` and `maxActive`: high enough that the run finishes
    /// quickly.
    pub admit_per_second: u32,
    pub max_active: u32,
    /// Between a shopper's polls. A ticket's poll budget refills one poll every
    /// `SECKILL_QUEUE_POLL_EVERY_MS` (1 s by default) and holds 20: at 1 s a shopper
    /// never meets 429 `POLLING_TOO_FAST`, and faster for at most the burst. The room
    /// itself asks for `refreshIntervalSeconds` (6 s), too slow for a short run.
    pub poll_every: Duration,
}

impl Default for RoomPlan {
    fn default() -> Self {
        Self {
            shoppers: 100,
            admit_per_second: 50,
            max_active: 100,
            poll_every: Duration::from_secs(1),
        }
    }
}

/// The side load (see `side`): `GET /api/limited` from a few client ids and
/// `GET /api/orders/mine` from a few users, all behind one address, each key at `rate`.
#[derive(Debug, Clone)]
pub struct SideLoad {
    /// Client ids of `/api/limited`: how many ask for each algorithm (`?policy=`).
    pub limited: Vec<(String, u32)>,
    /// Users reading their orders (ids after the purchasing users).
    pub orders_read_users: u32,
    /// Requests per second of each key.
    pub rate: f64,
    /// The k-th key of an algorithm (and the k-th reader) starts k × `stagger` after
    /// the load: a window algorithm's keys then meet a fault in different phases of
    /// their windows (a full log is refused from the denial cache, in process or not).
    pub stagger: Duration,
}
