//! The words every layer shares, spelled once: how a purchase ended, how the limiter
//! decided, where an order is in its life, what the reconciler repaired, why the
//! connection guard ended a connection. Metric labels, the API, the stats buckets and
//! the pages all use these spellings; clients and dashboards depend on them, so they
//! never change.
//!
//! At the bottom of the layers, so the domain, the metrics and the stats can all name
//! them without depending on one another.

use std::str::FromStr;

/// A closed set of words, each with its one spelling.
pub trait Word: Copy + 'static {
    /// Every word of the set, in a fixed order.
    const ALL: &'static [Self];

    /// The word's one spelling.
    fn label(self) -> &'static str;

    /// Every spelling, in the order of [`Self::ALL`] (to seed metric series at 0).
    fn labels() -> impl Iterator<Item = &'static str> {
        Self::ALL.iter().map(|word| word.label())
    }

    /// The word a spelling names: what a stored or received word is read back with, so
    /// an unknown one is an error rather than a default.
    fn from_label(s: &str) -> Result<Self, UnknownWord> {
        Self::ALL
            .iter()
            .copied()
            .find(|word| word.label() == s)
            .ok_or_else(|| UnknownWord(s.to_string()))
    }
}

/// Spells each variant of a fieldless enum once and lists them in `ALL`.
macro_rules! words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $label:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every word of the set, in a fixed order.
            pub const ALL: &'static [Self] = &[$(Self::$variant,)+];

            /// The word's one spelling.
            pub const fn label(self) -> &'static str {
                match self {
                    $(Self::$variant => $label,)+
                }
            }
        }

        impl Word for $name {
            const ALL: &'static [Self] = $name::ALL;

            fn label(self) -> &'static str {
                $name::label(self)
            }
        }
    };
}

words! {
    /// How a purchase ended: the label of `seckill_sale_outcomes_total`, and what the
    /// dashboard counts purchases by.
    Outcome {
        /// An order was committed: the 200.
        Created => "created",
        /// No unit left: 409 `SOLD_OUT`.
        SoldOut => "sold_out",
        /// The user has a live order of the item: 409 `ALREADY_PURCHASED`.
        AlreadyPurchased => "already_purchased",
        /// Before the sale's start: 409 `SALE_NOT_STARTED`.
        NotStarted => "not_started",
        /// From the sale's end on: 409 `SALE_ENDED`.
        Ended => "ended",
        /// An operator paused the sale: 409 `SALE_PAUSED`.
        Paused => "paused",
        /// The item's price changed after the purchase was admitted (the commit's check).
        PriceChanged => "price_changed",
        /// No such item: 404 `ITEM_NOT_FOUND`.
        NotFound => "not_found",
        /// The limiter refused: 429.
        RateLimited => "rate_limited",
        /// The limiter could not ask Redis and failed closed: 503.
        LimiterUnavailable => "limiter_unavailable",
        /// The order could not be placed: 503 `ORDER_FAILED`.
        OrderFailed => "order_failed",
        /// The order's commit is still unanswered: 202 `ORDER_PENDING`, the reconciler decides.
        OrderPending => "order_pending",
        /// An `Idempotency-Key` retry answered without running the purchase again.
        IdempotentReplay => "idempotent_replay",
        /// Shed at the purchase path's concurrency limit (`sale::overload`).
        Overloaded => "overloaded",
        /// Refused while the orders breaker is open (`sale::overload`).
        OrdersUnavailable => "orders_unavailable",
        /// Refused by the reservation script: the item's waiting room is on and no
        /// valid pass came (403 `NOT_ADMITTED`).
        NotAdmitted => "not_admitted",
    }
}

words! {
    /// A limiter rule's decision: the `outcome` label of `seckill_limiter_decisions_total`.
    Decision {
        /// Admitted by the rule.
        Pass => "pass",
        /// Refused by the rule.
        Reject => "reject",
    }
}

words! {
    /// What the limiter does when it cannot ask Redis: a policy's `fail_mode` in the
    /// settings, the API and the policy editor, and (as [`LimiterMode::Failing`]) the
    /// `mode` label of `seckill_limiter_mode` while it applies.
    FailMode {
        /// Let the request through, count it, log it (once per burst). For routes where an
        /// outage of the limiter must not become an outage of the service.
        Open => "open",
        /// Refuse with 503 `LIMITER_UNAVAILABLE`. For routes that cannot work without
        /// Redis anyway (the sale).
        Closed => "closed",
        /// Keep limiting in process: each rule at this instance's share of its threshold
        /// (see `limiter::fallback_limits`). For routes whose limit is a protection (the
        /// admin lockout) or a promise to other callers.
        Local => "local",
    }
}

/// A policy whose settings do not say fails open (the serde default of `fail_mode`).
impl Default for FailMode {
    fn default() -> Self {
        Self::Open
    }
}

/// The spellings, for serde's error on an unknown one.
const FAIL_MODE_LABELS: [&str; FailMode::ALL.len()] = {
    let mut labels = [""; FailMode::ALL.len()];
    let mut i = 0;
    while i < labels.len() {
        labels[i] = FailMode::ALL[i].label();
        i += 1;
    }
    labels
};

impl serde::Serialize for FailMode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label())
    }
}

impl<'de> serde::Deserialize<'de> for FailMode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let word = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Self::from_label(&word)
            .map_err(|_| serde::de::Error::unknown_variant(&word, &FAIL_MODE_LABELS))
    }
}

impl utoipa::PartialSchema for FailMode {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some("What the limiter does when it cannot ask Redis."))
            .enum_values(Some(FAIL_MODE_LABELS))
            .into()
    }
}

impl utoipa::ToSchema for FailMode {}

/// How a policy is deciding: the `mode` label of `seckill_limiter_mode`. An
/// observation, where [`FailMode`] is configuration: while Redis answers, `redis`;
/// while it cannot be asked, the fail mode in force, spelled as the fail mode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimiterMode {
    /// In Redis, shared by every instance: the normal way.
    Redis,
    /// Redis cannot be asked: the policy's fail mode decides (`local` also for the
    /// admin lockout counting in process).
    Failing(FailMode),
}

impl LimiterMode {
    /// `redis`, then each fail mode in [`FailMode::ALL`]'s order.
    pub const ALL: &'static [Self] = &{
        let mut all = [Self::Redis; 1 + FailMode::ALL.len()];
        let mut i = 0;
        while i < FailMode::ALL.len() {
            all[i + 1] = Self::Failing(FailMode::ALL[i]);
            i += 1;
        }
        all
    };

    /// The mode's one spelling: `redis`, or the fail mode's.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Failing(mode) => mode.label(),
        }
    }
}

impl Word for LimiterMode {
    const ALL: &'static [Self] = LimiterMode::ALL;

    fn label(self) -> &'static str {
        LimiterMode::label(self)
    }
}

words! {
    /// Where an order is in its life: the spelling in Postgres, the API, the metrics and
    /// the pages.
    OrderState {
        /// Placed, waiting for payment until its deadline.
        PendingPayment => "pending_payment",
        /// Paid: the unit is sold for good.
        Paid => "paid",
        /// Cancelled by its shopper; the unit goes back on sale.
        Cancelled => "cancelled",
        /// Not paid by its deadline; the unit goes back on sale.
        Expired => "expired",
    }
}

impl OrderState {
    /// The spelling (see [`Word::label`]).
    pub fn as_str(self) -> &'static str {
        self.label()
    }

    /// A live order holds its unit for good or until its deadline.
    pub fn is_live(self) -> bool {
        matches!(self, Self::PendingPayment | Self::Paid)
    }

    /// The states an order moves to (every one but the first).
    pub fn moves() -> impl Iterator<Item = Self> {
        Self::ALL
            .iter()
            .copied()
            .filter(|s| *s != Self::PendingPayment)
    }
}

impl FromStr for OrderState {
    type Err = UnknownWord;

    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        Self::from_label(s)
    }
}

impl serde::Serialize for OrderState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label())
    }
}

/// A spelling that names no word of its set.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown word {0:?}")]
pub struct UnknownWord(pub String);

words! {
    /// What the reconciler repaired: the `kind` label of
    /// `seckill_reconciler_repairs_total` (see ARCHITECTURE.md's glossary).
    Repair {
        /// A pending reservation whose order exists: its record cleared.
        Settled => "settled",
        /// A pending reservation whose order does not: undone.
        Released => "released",
        /// Redis disagreed with Postgres: set back to it (compare-and-set).
        Drift => "drift",
        /// A missing stock counter: rebuilt from Postgres.
        Rebuilt => "rebuilt",
        /// Released units the sweeper had not given back: given back.
        Returned => "returned",
    }
}

words! {
    /// Why the connection guard ended a connection: the `reason` label of
    /// `seckill_connections_cut_total`.
    ConnectionCut {
        /// Refused as it arrived: its address held its share of connections.
        PerAddress => "per_address",
        /// A request head took longer than its deadline.
        HeadTimeout => "head_timeout",
        /// Waiting for a head, the longest of those waiting when a newcomer found the
        /// listener's budget of them full (`max_connections_awaiting_head`).
        HeadBudget => "head_budget",
    }
}

words! {
    /// In what order a waiting room admits (see `sale::room`).
    RoomOrder {
        /// In the order of joining; those who joined during the pre-queue are shuffled
        /// at the sale's start.
        Fifo => "fifo",
        /// Every second's joiners shuffled among themselves too.
        Random => "random",
    }
}

impl FromStr for RoomOrder {
    type Err = UnknownWord;

    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        Self::ALL
            .iter()
            .copied()
            .find(|order| order.label() == s)
            .ok_or_else(|| UnknownWord(s.to_string()))
    }
}

impl serde::Serialize for RoomOrder {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label())
    }
}

words! {
    /// Where a shopper's place in a waiting room stands: the `state` of a poll.
    QueueState {
        /// In the queue; not admitted yet.
        Waiting => "waiting",
        /// The place was reached: the answer carries a pass.
        Admitted => "admitted",
        /// No unit left and none being bought; the place is kept in case one comes back.
        SoldOut => "sold_out",
        /// The place was given up (not polled in time) or its pass expired unused.
        Expired => "expired",
        /// The queue has ended for good: the item sold out with no unit left to come
        /// back, the room is off or the sale has ended ([`ClosedReason`]).
        Closed => "closed",
    }
}

words! {
    /// Why a queue is closed: the `closedReason` of a poll that answers `closed`.
    ClosedReason {
        /// Sold out and no unit can come back: no unpaid order, no reservation in
        /// flight, no live pass (`lua/room_close.lua`). Raising the stock reopens it.
        SoldOut => "sold_out",
        /// The sale has ended (or the ticket, which lives until the sale's end, has).
        Ended => "ended",
        /// The operator turned the room off.
        Off => "off",
    }
}

words! {
    /// What became of a queue pass offered with a purchase: the `outcome` label of
    /// `seckill_queue_passes_total`.
    PassOutcome {
        /// It bought a unit (and can buy no other).
        Used => "used",
        /// It was past its expiry.
        Expired => "expired",
        /// Missing, forged, someone else's, another item's, or used already.
        Refused => "refused",
    }
}

words! {
    /// Where the orders breaker stands (`sale::overload::breaker`): the `to` label of
    /// `seckill_orders_breaker_transitions_total`; its place in this list is the value
    /// of `seckill_orders_breaker_state`.
    BreakerState {
        /// Commits go through; failures are being counted.
        Closed => "closed",
        /// Purchases are refused before their reservation until the interval is over.
        Open => "open",
        /// One purchase, the probe, is committing; the others are refused until it is told.
        HalfOpen => "half_open",
    }
}

words! {
    /// An operator's change of an item: the `action` of its audit entry, in Postgres
    /// (`item_audit`, whose CHECK lists the same words) and in the admin API.
    ItemAction {
        /// Created it.
        Create => "create",
        /// Changed its name, price, end or stock.
        Edit => "edit",
        /// Ended its sale now.
        End => "end",
        /// Archived it: it takes no change from then on.
        Archive => "archive",
        /// Paused its sale.
        Pause => "pause",
        /// Resumed its sale.
        Resume => "resume",
        /// Changed its waiting room: turned it on or off, its settings or its message,
        /// or reopened it by raising a closed room's stock.
        Room => "room",
    }
}

words! {
    /// An admin token compared with the configured ones: the `outcome` label of
    /// `seckill_admin_token_comparisons_total`.
    TokenComparison {
        /// A configured token, by its name.
        Accepted => "accepted",
        /// No configured token.
        Refused => "refused",
    }
}

words! {
    /// The stable `code` of every error answer (`{"code", "message"}`), spelled only
    /// here: `ApiError`, `SaleError` and `RoomError` name a variant, the OpenAPI
    /// document's enum is [`ErrorCode::ALL`], and `tests/docs.rs` holds the README's
    /// error table and `static/words.js` to it. Clients switch on these: they never change.
    ErrorCode {
        /// The body is not JSON.
        MalformedJson => "MALFORMED_JSON",
        /// Well-formed but invalid; `field` names the culprit.
        ValidationFailed => "VALIDATION_FAILED",
        /// Missing or invalid credentials.
        Unauthenticated => "UNAUTHENTICATED",
        /// A purchase of an item with its waiting room on, without a valid pass.
        NotAdmitted => "NOT_ADMITTED",
        /// A waiting-room poll's ticket is not this shopper's for this item.
        InvalidTicket => "INVALID_TICKET",
        /// An operator blocked the caller's user or address (`POST /admin/api/blocks`).
        Blocked => "BLOCKED",
        /// No such path (or page, or policy).
        NotFound => "NOT_FOUND",
        /// The path exists, the method does not.
        MethodNotAllowed => "METHOD_NOT_ALLOWED",
        /// A page's `If-Match` / `If-Unmodified-Since` does not hold.
        PreconditionFailed => "PRECONDITION_FAILED",
        /// A page's `Range` lies outside it.
        RangeNotSatisfiable => "RANGE_NOT_SATISFIABLE",
        /// The body did not arrive within the body deadline.
        RequestTimeout => "REQUEST_TIMEOUT",
        /// The body is over the size limit.
        PayloadTooLarge => "PAYLOAD_TOO_LARGE",
        /// A body that is not `application/json`.
        UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
        /// A purchase or an operator's change of an unknown item.
        ItemNotFound => "ITEM_NOT_FOUND",
        /// Before the item's sale window.
        SaleNotStarted => "SALE_NOT_STARTED",
        /// After the item's sale window, or after an operator ended it.
        SaleEnded => "SALE_ENDED",
        /// An operator paused the item.
        SalePaused => "SALE_PAUSED",
        /// The price changed after the purchase was admitted; nothing was bought.
        PriceChanged => "PRICE_CHANGED",
        /// One order per user per item.
        AlreadyPurchased => "ALREADY_PURCHASED",
        /// No stock left.
        SoldOut => "SOLD_OUT",
        /// Joining a waiting room before it opens.
        QueueNotOpen => "QUEUE_NOT_OPEN",
        /// Joining an item with no waiting room on, or whose sale has ended.
        QueueClosed => "QUEUE_CLOSED",
        /// Joining a room closed for good: sold out, no unit can come back.
        RoomClosed => "ROOM_CLOSED",
        /// The same `Idempotency-Key` is still being processed.
        IdempotencyInProgress => "IDEMPOTENCY_IN_PROGRESS",
        /// Paying or cancelling an order the caller does not have.
        OrderNotFound => "ORDER_NOT_FOUND",
        /// Paying or cancelling an order that is not pending payment.
        OrderState => "ORDER_STATE",
        /// An item's stock lowered below what is sold or held.
        StockTooLow => "STOCK_TOO_LOW",
        /// Editing or ending an archived item.
        ItemArchived => "ITEM_ARCHIVED",
        /// Editing the end of a sale an operator ended.
        EndedByOperator => "ENDED_BY_OPERATOR",
        /// Another stock edit of the same item is running.
        EditInProgress => "EDIT_IN_PROGRESS",
        /// A policy edit made from an older version.
        VersionConflict => "VERSION_CONFLICT",
        /// The `Idempotency-Key` was used for another item.
        IdempotencyMismatch => "IDEMPOTENCY_MISMATCH",
        /// A limit refused (a limiter rule, or the sign-in lockout).
        RateLimited => "RATE_LIMITED",
        /// A waiting-room ticket polled past its bucket.
        PollingTooFast => "POLLING_TOO_FAST",
        /// Too many of this user's keyed purchases in flight.
        TooManyPending => "TOO_MANY_PENDING",
        /// The order's COMMIT is still running; it may yet land.
        OrderPending => "ORDER_PENDING",
        /// An unexpected failure; the cause is logged, never sent.
        Internal => "INTERNAL",
        /// The NGINX gate was asked without its secret: NGINX is misconfigured.
        GateSecretInvalid => "GATE_SECRET_INVALID",
        /// The order was not committed; Redis was put back.
        OrderFailed => "ORDER_FAILED",
        /// Shed at the purchase path's concurrency limit.
        Overloaded => "OVERLOADED",
        /// The orders breaker is open.
        OrdersUnavailable => "ORDERS_UNAVAILABLE",
        /// Redis cannot be asked and the policy fails closed.
        LimiterUnavailable => "LIMITER_UNAVAILABLE",
        /// The waiting room's Redis did not answer.
        QueueUnavailable => "QUEUE_UNAVAILABLE",
        /// Readiness: a store is down.
        NotReady => "NOT_READY",
        /// A store needed for the answer could not be reached; nothing was changed.
        StoreUnavailable => "STORE_UNAVAILABLE",
    }
}

impl ErrorCode {
    /// The spelling on the wire (see [`Word::label`]).
    pub fn as_str(self) -> &'static str {
        self.label()
    }

    /// The HTTP status every answer with this code carries, as a number (this layer
    /// knows no HTTP types): one status per code, so the README's table can say it once.
    pub fn status(self) -> u16 {
        match self {
            Self::OrderPending => 202,
            Self::MalformedJson | Self::ValidationFailed => 400,
            Self::Unauthenticated => 401,
            Self::NotAdmitted | Self::InvalidTicket | Self::Blocked => 403,
            Self::NotFound | Self::ItemNotFound | Self::OrderNotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::RequestTimeout => 408,
            Self::SaleNotStarted
            | Self::SaleEnded
            | Self::SalePaused
            | Self::PriceChanged
            | Self::AlreadyPurchased
            | Self::SoldOut
            | Self::QueueNotOpen
            | Self::QueueClosed
            | Self::RoomClosed
            | Self::IdempotencyInProgress
            | Self::OrderState
            | Self::StockTooLow
            | Self::ItemArchived
            | Self::EndedByOperator
            | Self::EditInProgress
            | Self::VersionConflict => 409,
            Self::PreconditionFailed => 412,
            Self::PayloadTooLarge => 413,
            Self::UnsupportedMediaType => 415,
            Self::RangeNotSatisfiable => 416,
            Self::IdempotencyMismatch => 422,
            Self::RateLimited | Self::PollingTooFast | Self::TooManyPending => 429,
            Self::Internal | Self::GateSecretInvalid => 500,
            Self::OrderFailed
            | Self::Overloaded
            | Self::OrdersUnavailable
            | Self::LimiterUnavailable
            | Self::QueueUnavailable
            | Self::NotReady
            | Self::StoreUnavailable => 503,
        }
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn distinct<W: Word>() -> bool {
        let labels: Vec<_> = W::labels().collect();
        let mut sorted = labels.clone();
        sorted.sort_unstable();
        sorted.dedup();
        sorted.len() == labels.len()
    }

    #[test]
    fn every_set_spells_each_word_once_and_lists_it_in_order() {
        assert!(distinct::<Outcome>() && distinct::<Decision>() && distinct::<OrderState>());
        assert!(distinct::<Repair>() && distinct::<ConnectionCut>());
        assert!(distinct::<FailMode>() && distinct::<LimiterMode>());
        assert!(distinct::<RoomOrder>() && distinct::<QueueState>() && distinct::<PassOutcome>());
        assert!(distinct::<ClosedReason>());
        assert!(distinct::<ErrorCode>());
        for (index, outcome) in Outcome::ALL.iter().enumerate() {
            assert_eq!(*outcome as usize, index);
        }
    }

    #[test]
    fn the_item_audits_check_allows_exactly_the_item_actions() {
        let migration = include_str!("../migrations/20261204000040_room_in_item_history.sql");
        let listed: Vec<String> = ItemAction::labels().map(|a| format!("'{a}'")).collect();
        let check = format!("CHECK (action IN ({}))", listed.join(", "));
        assert!(migration.contains(&check), "{check}");
        assert!(distinct::<ItemAction>());
        assert_eq!(ItemAction::from_label("end"), Ok(ItemAction::End));
        assert!(ItemAction::from_label("reopen").is_err());
    }

    #[test]
    fn a_fail_mode_is_spelled_once_for_the_settings_and_for_the_mode_it_decides_in() {
        for mode in FailMode::ALL {
            assert_eq!(serde_json::to_value(mode).unwrap(), mode.label());
            let read: FailMode = serde_json::from_value(mode.label().into()).unwrap();
            assert_eq!(read, *mode);
            assert_eq!(LimiterMode::Failing(*mode).label(), mode.label());
        }
        let modes: Vec<_> = LimiterMode::labels().collect();
        assert_eq!(modes, ["redis", "open", "closed", "local"]);
        let unknown = serde_json::from_value::<FailMode>("maybe".into()).unwrap_err();
        assert_eq!(
            unknown.to_string(),
            "unknown variant `maybe`, expected one of `open`, `closed`, `local`"
        );
    }

    #[test]
    fn a_breaker_state_is_its_place_in_the_list() {
        // `seckill_orders_breaker_state` reads 0, 1, 2 in this order.
        assert!(distinct::<BreakerState>());
        for (index, state) in BreakerState::ALL.iter().enumerate() {
            assert_eq!(*state as usize, index);
        }
    }

    #[test]
    fn an_order_state_reads_back_from_its_spelling() {
        for state in OrderState::ALL {
            assert_eq!(state.label().parse::<OrderState>(), Ok(*state));
        }
        assert!("refunded".parse::<OrderState>().is_err());
        assert_eq!(
            OrderState::moves()
                .map(OrderState::label)
                .collect::<Vec<_>>(),
            ["paid", "cancelled", "expired"]
        );
    }
}
