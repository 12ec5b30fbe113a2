// The words both pages share, each spelled once: the server's (src/vocabulary.rs: how a
// purchase ended, where an order is in its life; the API's error codes the pages act
// on; the limiter's words and bounds the policy editor offers) and the label a person
// reads for each. The pages compare against these objects and show their labels; no
// other file spells them. tests/docs.rs holds them to the server's.

/** A word: its spelling on the wire (or in CSS), what a person reads, and more facts. */
const word = (spelling, label, more = {}) => Object.freeze({ word: spelling, label, ...more });

/** The API's error codes the pages act on (`code` of the JSON error envelope). */
export const ErrorCode = Object.freeze({
  RATE_LIMITED: 'RATE_LIMITED',
  UNAUTHENTICATED: 'UNAUTHENTICATED',
  VALIDATION_FAILED: 'VALIDATION_FAILED',
  VERSION_CONFLICT: 'VERSION_CONFLICT',
  NOT_FOUND: 'NOT_FOUND',
  SOLD_OUT: 'SOLD_OUT',
  ALREADY_PURCHASED: 'ALREADY_PURCHASED',
  SALE_NOT_STARTED: 'SALE_NOT_STARTED',
  SALE_PAUSED: 'SALE_PAUSED',
  SALE_ENDED: 'SALE_ENDED',
  PRICE_CHANGED: 'PRICE_CHANGED',
  ITEM_NOT_FOUND: 'ITEM_NOT_FOUND',
  ITEM_ARCHIVED: 'ITEM_ARCHIVED',
  STOCK_TOO_LOW: 'STOCK_TOO_LOW',
  EDIT_IN_PROGRESS: 'EDIT_IN_PROGRESS',
  ORDER_STATE: 'ORDER_STATE',
  IDEMPOTENCY_IN_PROGRESS: 'IDEMPOTENCY_IN_PROGRESS',
  LIMITER_UNAVAILABLE: 'LIMITER_UNAVAILABLE',
  ORDER_FAILED: 'ORDER_FAILED',
  OVERLOADED: 'OVERLOADED',
  ORDERS_UNAVAILABLE: 'ORDERS_UNAVAILABLE',
  NOT_ADMITTED: 'NOT_ADMITTED',
  INVALID_TICKET: 'INVALID_TICKET',
  BLOCKED: 'BLOCKED',
  QUEUE_NOT_OPEN: 'QUEUE_NOT_OPEN',
  QUEUE_CLOSED: 'QUEUE_CLOSED',
  ROOM_CLOSED: 'ROOM_CLOSED',
  /** Made up by api.js: no answer reached the page. */
  NETWORK: 'NETWORK',
});

/**
 * How a purchase ended (vocabulary::Outcome) where the pages name it: the dashboard's
 * chart lines and the shopper's outcome lines. `code` is the refusal's API code.
 */
export const Outcome = Object.freeze({
  CREATED: word('created', 'Created'),
  SOLD_OUT: word('sold_out', 'Sold out', { code: ErrorCode.SOLD_OUT }),
  ALREADY_PURCHASED: word('already_purchased', 'Already purchased', { code: ErrorCode.ALREADY_PURCHASED }),
  NOT_STARTED: word('not_started', 'Not started', { code: ErrorCode.SALE_NOT_STARTED }),
  PAUSED: word('paused', 'Paused', { code: ErrorCode.SALE_PAUSED }),
  ENDED: word('ended', 'Ended', { code: ErrorCode.SALE_ENDED }),
});

/** Where an order is in its life (vocabulary::OrderState), in the server's order. */
export const OrderState = Object.freeze({
  PENDING_PAYMENT: word('pending_payment', 'Awaiting payment'),
  PAID: word('paid', 'Paid'),
  CANCELLED: word('cancelled', 'Cancelled'),
  EXPIRED: word('expired', 'Expired'),
});

/** Every order state, in the server's order. */
export const ORDER_STATES = Object.freeze(Object.values(OrderState));

/** A live order holds its unit: the shopper has the item (vocabulary's `is_live`). */
export function isLiveOrder(order) {
  return Boolean(order) && (order.state === OrderState.PENDING_PAYMENT.word || order.state === OrderState.PAID.word);
}

/** An order state's label; a state this page does not know shows as the server spells it. */
export function orderStateLabel(spelling) {
  const state = ORDER_STATES.find((s) => s.word === spelling);
  return state ? state.label : spelling;
}

/**
 * Where a shopper's place in an item's waiting room stands (vocabulary::QueueState): the
 * `state` of GET /api/items/{id}/queue. `final`: nothing more will happen to the place,
 * so the page stops asking.
 */
export const QueueState = Object.freeze({
  WAITING: word('waiting', 'In the queue'),
  ADMITTED: word('admitted', 'Your turn'),
  SOLD_OUT: word('sold_out', Outcome.SOLD_OUT.label),
  EXPIRED: word('expired', 'Place expired', { final: true }),
  CLOSED: word('closed', 'Queue closed', { final: true }),
});

/** Why a queue is closed (vocabulary::ClosedReason): the `closedReason` of a `closed` answer. */
export const ClosedReason = Object.freeze({
  SOLD_OUT: word('sold_out', 'Sold out'),
  ENDED: word('ended', 'Sale ended'),
  OFF: word('off', 'Queue turned off'),
});

/** A queue state by its spelling, or undefined for one this page does not know. */
export function queueStateOf(spelling) {
  return Object.values(QueueState).find((s) => s.word === spelling);
}

/** In what order a waiting room admits (vocabulary::RoomOrder), with what it means. */
export const RoomOrder = Object.freeze({
  FIFO: word('fifo', 'First come, first served', {
    hint: 'Places in the order of joining; those who joined before the start are shuffled at the start.',
  }),
  RANDOM: word('random', 'Random', {
    hint: 'Every second’s joiners are shuffled among themselves too: a faster click buys no better place.',
  }),
});

/**
 * What an operator did to an item (the `action` of GET /admin/api/items/{id}/audit), in
 * the past tense an audit line reads.
 */
export const ItemAction = Object.freeze({
  CREATE: word('create', 'Created'),
  EDIT: word('edit', 'Edited'),
  END: word('end', 'Sale ended'),
  ARCHIVE: word('archive', 'Archived'),
  PAUSE: word('pause', 'Paused'),
  RESUME: word('resume', 'Resumed'),
  ROOM: word('room', 'Waiting room set'),
});

/** An item action's label; one this page does not know shows as the server spells it. */
export function itemActionLabel(spelling) {
  const action = Object.values(ItemAction).find((a) => a.word === spelling);
  return action ? action.label : spelling;
}

/**
 * Where an item's sale stands by this browser's clock (a page's word, not the server's:
 * `word` is the CSS spelling of `data-phase` and of the `badge-…` class). `refusal` is
 * the outcome a purchase meets in it.
 */
export const Phase = Object.freeze({
  OPEN: word('open', 'On sale'),
  UPCOMING: word('upcoming', 'Upcoming', { refusal: Outcome.NOT_STARTED }),
  PAUSED: word('paused', Outcome.PAUSED.label, { refusal: Outcome.PAUSED }),
  SOLD_OUT: word('sold-out', Outcome.SOLD_OUT.label, { refusal: Outcome.SOLD_OUT }),
  ENDED: word('ended', Outcome.ENDED.label, { refusal: Outcome.ENDED }),
  /** Only operators see an archived item (the shop no longer lists it). */
  ARCHIVED: word('archived', 'Archived', { refusal: Outcome.ENDED }),
});

/**
 * What a shopper can do with an item now: an ended sale is over; a paused one says so
 * whether or not it has begun (a countdown to a start that will not sell would mislead);
 * one not begun waits.
 */
export function phaseOf(item, now = Date.now()) {
  if (item.archivedAt) return Phase.ARCHIVED;
  if (Date.parse(item.endsAt) <= now) return Phase.ENDED;
  if (item.paused) return Phase.PAUSED;
  if (Date.parse(item.startsAt) > now) return Phase.UPCOMING;
  if (Number(item.remainingStock) <= 0) return Phase.SOLD_OUT;
  return Phase.OPEN;
}

/** Whether the shop shows the item: on sale, sold out, paused or still to come. */
export function inShop(item, now = Date.now()) {
  const phase = phaseOf(item, now);
  return phase !== Phase.ENDED && phase !== Phase.ARCHIVED;
}

/**
 * The limiter's algorithms (limiter::Algorithm), in the editor's order, with what each
 * does (shown beside its select). `shapes`: an admitted call may wait for its slot, so
 * its rules have a max delay.
 */
export const Algorithm = Object.freeze({
  SLIDING_WINDOW: word('sliding_window', 'Sliding window', {
    hint: 'Exact: counts every call of the last window (one entry per call in Redis).',
  }),
  TOKEN_BUCKET: word('token_bucket', 'Token bucket', {
    hint: 'A burst up to the threshold, then the threshold per window, refilled continuously.',
  }),
  FIXED_WINDOW: word('fixed_window', 'Fixed window', {
    hint: 'One counter per window: the cheapest; up to twice the threshold across a window\u2019s edge.',
  }),
  SLIDING_WINDOW_COUNTER: word('sliding_window_counter', 'Sliding window counter', {
    hint: 'This window\u2019s and the last one\u2019s counts, weighted by time: close to exact, two counters a key.',
  }),
  GCRA: word('gcra', 'GCRA', {
    hint: 'The token bucket kept as one timestamp a key: the same burst and rate, less to store.',
  }),
  LEAKY_BUCKET: word('leaky_bucket', 'Leaky bucket', {
    hint: 'A shaper: calls leave at an even rate; one admitted waits up to its rule\u2019s max delay for its slot.',
    shapes: true,
  }),
});

/** What the limiter does when it cannot ask Redis (a policy's fail mode), with what it means. */
export const FailMode = Object.freeze({
  CLOSED: word('closed', 'Refuse (fail closed)', { hint: 'While Redis is down, every call this policy guards is refused (503).' }),
  OPEN: word('open', 'Allow (fail open)', { hint: 'While Redis is down, calls pass unlimited.' }),
  LOCAL: word('local', 'Limit here (fallback limits)', {
    hint: 'While Redis is down, each instance enforces its share of every limit (the threshold over the instances alive, rounded up).',
  }),
});

/** A policy's scopes (limiter::Scope), with what each means (shown beside its select). */
export const Scope = Object.freeze({
  GLOBAL: word('global', 'Global', {
    hint: 'One limit for the whole shop: all of this policy\u2019s keys live in one Redis slot.',
  }),
  PER_ITEM: word('per_item', 'Per item', {
    hint: 'Each sale counts separately: its limiter keys live beside the item\u2019s stock.',
  }),
});

/** What a rule counts by (limiter::KeySource). `literal` is one counter shared by every caller. */
export const KeySource = Object.freeze({
  USER: word('user', 'User id'),
  IP: word('ip', 'Client address'),
  NETWORK: word('network', 'Client network (IPv4 /24, IPv6 /48)'),
  CLIENT_ID: word('client_id', 'Client id (X-Client-Id)'),
  ROUTE: word('route', 'Route'),
  LITERAL: word('literal', 'One shared counter (named)'),
});

/** A rule's name on the wire (the server's `RuleEdit.name`). */
export const RULE_NAME = /^[a-z0-9_-]{1,32}$/;
/** A literal key's value (the server's client id). */
export const LITERAL_KEY = /^[A-Za-z0-9._:-]{1,64}$/;
/** Rules in a policy, shadow rules included (the server's `MAX_RULES`). */
export const MAX_RULES = 8;
/** The longest a leaky bucket may hold a call (the server's `MAX_DELAY_MS`). */
export const MAX_DELAY_MS = 60_000;
/** Policies whose rules are fixed: the server refuses new ones (failed sign-ins are counted one way). */
export const FIXED_RULES = Object.freeze(new Set(['admin_auth']));

/**
 * What kind of offender a rule names one (history::classify::Label, the `label` of
 * GET /admin/api/offenders). `risky`: blocking it hurts honest shoppers, so the
 * dashboard asks first.
 */
export const OffenderLabel = Object.freeze({
  SHARED_ADDRESS: word('shared_address', 'Shared address', { risky: true }),
  SCRIPTED_ACCOUNT: word('scripted_account', 'Scripted account'),
  BURST_SOURCE: word('burst_source', 'Burst source'),
  QUEUE_FARMER: word('queue_farmer', 'Queue farmer'),
});

/** An offender label's reading; none is an empty string, an unknown one as spelled. */
export function offenderLabel(spelling) {
  if (!spelling) return '';
  const label = Object.values(OffenderLabel).find((l) => l.word === spelling);
  return label ? label.label : spelling;
}
