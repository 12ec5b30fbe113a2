// The shopper page: dev sign-in, the live item list, purchases and what follows them on
// the item's card (pay by when, Pay, Cancel), "My orders". An item with a waiting room is
// joined first; its queue is queue.js's.
import { api, newIdempotencyKey, retryAfterMs } from './api.js';
import { announce, byId, confirmDialog, el, keepInOrder, poll } from './dom.js';
import { formatClock, formatCountdown, formatDayClock, formatNumber, formatPrice, formatWait, sentence } from './format.js';
import { dropPanel, joinQueue, purchased, queueButton, queueOpensAt, queuePanel, queuePass, resumeQueue, setShopper, setupQueues } from './queue.js';
import { ErrorCode, Outcome, OrderState, Phase, inShop, isLiveOrder, orderStateLabel, phaseOf } from './words.js';

const SESSION_KEY = 'seckill.session';
const ITEMS_EVERY_MS = 2000;

const ui = {
  account: byId('account'),
  signedInAs: byId('signed-in-as'),
  signOut: byId('sign-out'),
  signInPanel: byId('sign-in-panel'),
  signInForm: byId('sign-in-form'),
  signInButton: byId('sign-in-button'),
  userId: byId('user-id'),
  signInError: byId('sign-in-error'),
  outcome: byId('outcome'),
  items: byId('items'),
  itemsStatus: byId('items-status'),
  itemsError: byId('items-error'),
  itemsEmpty: byId('items-empty'),
  ordersSection: byId('orders-section'),
  orders: byId('orders'),
  ordersEmpty: byId('orders-empty'),
  ordersError: byId('orders-error'),
  ordersRefresh: byId('orders-refresh'),
};

/** {token, userId, expiresAt} or null. */
let session = loadSession();
/** id → the latest item from GET /api/items. */
const items = new Map();
/** id → {li, …element references} of the rendered card. */
const cards = new Map();
/** Items with a purchase on the wire: their Buy button stays disabled. */
const inFlight = new Set();
/** id → the Idempotency-Key of a purchase that got no answer, reused by the retry. */
const unansweredKeys = new Map();
/** Names of items seen on this page, for orders of items that left the listing. */
const knownNames = new Map();
/**
 * item id → the shopper's live order of it (awaiting payment or paid), newest first from
 * My orders, or straight from a purchase's answer: its card shows it instead of Buy now.
 */
const liveOrders = new Map();
/** item id → when the limiter lets a purchase of it through again (ms, wall clock). */
const refusedUntil = new Map();
/** Order ids with a payment or a cancellation on the wire. */
const changing = new Set();

// --- session ------------------------------------------------------------------------

function loadSession() {
  try {
    const saved = JSON.parse(localStorage.getItem(SESSION_KEY) || 'null');
    if (!saved || typeof saved.token !== 'string' || !Number.isInteger(saved.userId)) return null;
    if (saved.expiresAt && Date.parse(saved.expiresAt) <= Date.now()) {
      localStorage.removeItem(SESSION_KEY);
      return null;
    }
    return saved;
  } catch {
    return null;
  }
}

function saveSession(value) {
  session = value;
  if (value) localStorage.setItem(SESSION_KEY, JSON.stringify(value));
  else localStorage.removeItem(SESSION_KEY);
  setShopper(value);
  renderSession();
  renderAllCards();
}

function renderSession() {
  const signedIn = session !== null;
  ui.account.hidden = !signedIn;
  ui.signInPanel.hidden = signedIn;
  ui.ordersSection.hidden = !signedIn;
  ui.signedInAs.textContent = signedIn ? `Signed in as user ${session.userId}` : '';
  if (!signedIn) {
    ui.orders.replaceChildren();
    ui.ordersEmpty.hidden = true;
    liveOrders.clear();
    refusedUntil.clear();
  }
}

function sessionExpired() {
  saveSession(null);
  announce(ui.outcome, 'Your session has expired. Please sign in again.', 'warn');
  ui.userId.focus();
}

ui.signInForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  announce(ui.signInError, '');
  ui.userId.removeAttribute('aria-invalid');
  const raw = ui.userId.value.trim();
  const userId = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(userId) || userId < 1) {
    ui.userId.setAttribute('aria-invalid', 'true');
    announce(ui.signInError, 'Enter your user id: a whole number of 1 or more.', 'error');
    ui.userId.focus();
    return;
  }
  ui.signInButton.disabled = true;
  const result = await api('/api/session', { method: 'POST', body: { userId } });
  ui.signInButton.disabled = false;
  if (!result.ok) {
    const text =
      result.error.code === ErrorCode.NOT_FOUND
        ? 'Sign-in is not available on this server.'
        : result.error.message;
    if (result.error.code === ErrorCode.VALIDATION_FAILED) ui.userId.setAttribute('aria-invalid', 'true');
    announce(ui.signInError, text, 'error');
    return;
  }
  const { token, expiresAt } = result.data;
  saveSession({ token, userId: Number(result.data.userId), expiresAt });
  announce(ui.outcome, `Welcome, user ${result.data.userId}. ${pickHint()}`, 'info');
  welcomeUp = true;
  loadOrders();
});

ui.signOut.addEventListener('click', () => {
  saveSession(null);
  unansweredKeys.clear();
  announce(ui.outcome, 'You are signed out.', 'info');
  for (const card of cards.values()) announce(card.outcome, '');
  ui.userId.focus();
});

/** The welcome is on screen: the first press on a card takes it down (it said what to press). */
let welcomeUp = false;

/** What to press, as fits the items listed: Buy now, Join the queue, or either. */
function pickHint() {
  const listed = [...items.values()];
  const queued = listed.filter((item) => item.waitingRoom).length;
  if (queued === 0) return 'Pick an item and press Buy now.';
  if (queued === listed.length) return 'Join an item’s queue: this page tells you when it is your turn.';
  return 'Pick an item: Buy now, or Join the queue where an item has one.';
}

// --- items --------------------------------------------------------------------------

function createCard(item) {
  const nameId = `item-${item.id}-name`;
  const refs = {};
  refs.name = el('h3', { id: nameId, class: 'item-name' });
  refs.badge = el('span', { class: 'badge' });
  refs.price = el('p', { class: 'price' });
  refs.stockText = el('span', { class: 'stock-text' });
  refs.meter = el('progress', { class: 'stock-meter', 'aria-hidden': 'true' });
  refs.when = el('p', { class: 'when muted small' });
  refs.roomNote = el('p', { class: 'room-note small', hidden: true });
  refs.queue = queuePanel(item.id);
  // The shopper's order of the item: when to pay by, the time left, Pay and Cancel.
  refs.heldTitle = el('p', { class: 'held-title' });
  refs.heldTimer = el('p', { class: 'held-timer small', role: 'timer' });
  refs.pay = el('button', {
    type: 'button',
    class: 'button button-primary button-small',
    text: 'Pay',
    onclick: () => payHeld(item.id),
  });
  refs.cancel = el('button', {
    type: 'button',
    class: 'button button-small',
    text: 'Cancel',
    onclick: () => cancelHeld(item.id),
  });
  refs.heldActions = el('div', { class: 'held-actions' }, refs.pay, refs.cancel);
  refs.held = el(
    'div',
    { class: 'held', role: 'group', 'aria-labelledby': nameId, hidden: true },
    refs.heldTitle,
    refs.heldTimer,
    refs.heldActions,
  );
  refs.buy = el('button', {
    type: 'button',
    class: 'button button-primary buy',
    'aria-describedby': nameId,
    onclick: () => press(item.id),
  });
  refs.outcome = el('p', {
    class: 'item-outcome',
    role: 'status',
    'aria-live': 'polite',
    'aria-atomic': 'true',
    hidden: true,
  });
  refs.li = el(
    'li',
    { class: 'card item-card', dataset: { itemId: String(item.id) } },
    el(
      'article',
      { 'aria-labelledby': nameId },
      el('div', { class: 'item-head' }, refs.name, refs.badge),
      refs.price,
      el('p', { class: 'stock' }, refs.stockText),
      refs.meter,
      refs.when,
      refs.roomNote,
      refs.queue,
      refs.held,
      refs.buy,
      refs.outcome,
    ),
  );
  return refs;
}

/** The card's order box: "Purchased — pay by 14:35" with the time left, or "Paid". */
function renderHeld(card, order) {
  card.held.hidden = !order;
  if (!order) return;
  const paid = order.state === OrderState.PAID.word;
  card.held.dataset.state = order.state;
  card.held.dataset.orderId = order.orderId;
  card.heldActions.hidden = paid;
  if (paid) {
    card.heldTitle.textContent = OrderState.PAID.label;
    card.heldTimer.textContent = 'Your order is paid: the item is yours.';
    card.heldTimer.removeAttribute('role');
    return;
  }
  card.heldTimer.setAttribute('role', 'timer');
  const left = Date.parse(order.payBy) - Date.now();
  card.heldTitle.textContent = order.payBy ? `Purchased — pay by ${formatClock(order.payBy)}` : 'Purchased — awaiting payment';
  card.heldTimer.textContent = !order.payBy
    ? ''
    : left > 0
      ? `${formatCountdown(left)} left to pay. Unpaid by then, the order expires and the unit goes back on sale.`
      : 'Payment time is up.';
  const busy = changing.has(order.orderId);
  card.pay.disabled = busy || left <= 0;
  card.cancel.disabled = busy || left <= 0;
  card.pay.setAttribute('aria-label', `Pay for ${knownNames.get(order.itemId) || 'this item'}`);
  card.cancel.setAttribute('aria-label', `Cancel the order of ${knownNames.get(order.itemId) || 'this item'}`);
}

function renderCard(id) {
  const item = items.get(id);
  const card = cards.get(id);
  if (!item || !card) return;
  const phase = phaseOf(item);
  const now = Date.now();
  card.li.dataset.phase = phase.word;
  card.name.textContent = item.name;
  card.price.textContent = formatPrice(item.priceCents);
  const remaining = Math.max(0, Number(item.remainingStock));
  card.stockText.textContent = `${formatNumber(remaining)} of ${formatNumber(item.totalStock)} left`;
  card.meter.max = Math.max(1, Number(item.totalStock));
  card.meter.value = remaining;

  card.badge.textContent =
    phase === Phase.UPCOMING ? `Starts in ${formatCountdown(Date.parse(item.startsAt) - now)}` : phase.label;
  card.badge.className = `badge badge-${phase.word}`;

  card.when.textContent =
    Date.parse(item.startsAt) > now
      ? `Sale opens ${formatDayClock(item.startsAt)}`
      : `Sale ends ${formatDayClock(item.endsAt)}`;

  const note = roomNote(item, phase, now);
  card.roomNote.textContent = note;
  card.roomNote.hidden = !note;

  const order = session ? liveOrders.get(id) : undefined;
  renderHeld(card, order);

  const busy = inFlight.has(id);
  const until = refusedUntil.get(id);
  let label = 'Buy now';
  let enabled = phase === Phase.OPEN;
  if (busy) label = 'Buying…';
  else if (!session) label = item.waitingRoom ? 'Sign in to join the queue' : 'Sign in to buy';
  else if (order) ({ label, enabled } = { label: 'Purchased', enabled: false });
  else if (item.waitingRoom) ({ label, enabled } = roomButton(id, phase));
  else if (phase.refusal) label = phase.refusal.label;
  // The limiter refused: nothing gets through before it said (a countdown, not a guess).
  if (!busy && session && !order && until > now && enabled) {
    label = `Try again in ${formatCountdown(until - now)}`;
    enabled = false;
  }
  card.li.dataset.waitingRoom = item.waitingRoom ? 'on' : 'off';
  card.li.dataset.held = order ? order.state : 'none';
  card.buy.textContent = label;
  card.buy.disabled = busy || !session || !enabled;
  // The turn is over (bought, or the pass ran out): the title is the page's again.
  if (turnTitleOf === id && !queuePass(id)) {
    turnTitleOf = null;
    document.title = PAGE_TITLE;
  }
  card.buy.setAttribute('aria-busy', busy ? 'true' : 'false');
}

/** The page's own title, put back once a turn is over. */
const PAGE_TITLE = document.title;
/** The item whose turn the tab's title announces, if any. */
let turnTitleOf = null;

/**
 * A shopper's turn came: a turn nobody misses. The tab's title says it (seen from
 * another tab), and the focus moves to Buy (a keyboard user presses Enter; a screen
 * reader reads the button and the card's announcement).
 */
function turnCame(id) {
  const card = cards.get(id);
  const item = items.get(id);
  turnTitleOf = id;
  document.title = `Your turn: ${item ? item.name : 'buy now'} — ${PAGE_TITLE}`;
  if (card && !card.buy.disabled) card.buy.focus();
}

/**
 * A signed-out visitor's word on an item sold through a queue that takes joiners now or
 * later (a pre-queue opens before the sale): when, and that signing in joins it.
 */
function roomNote(item, phase, now) {
  if (session || !item.waitingRoom || (phase !== Phase.OPEN && phase !== Phase.UPCOMING)) return '';
  const opens = Date.parse(item.queueOpensAt);
  if (Number.isFinite(opens) && opens > now) return `The queue opens ${formatDayClock(opens)}: sign in to join it then.`;
  return 'The queue is open: sign in to join it.';
}

/** The button of an item with a waiting room: join the queue, wait, or buy with the pass. */
function roomButton(id, phase) {
  const { label, action } = queueButton(id, phase);
  return { label, enabled: action !== null };
}

/**
 * The card's button: joins the item's queue, or buys. Without a queue, Buy asks first,
 * naming the item and its price: one press confirms. Only the confirmed press sends the
 * purchase, so the limiter counts nothing for a shopper who changes their mind.
 */
async function press(id) {
  const item = items.get(id);
  if (welcomeUp) {
    welcomeUp = false;
    announce(ui.outcome, '');
  }
  if (session && item && item.waitingRoom && queueButton(id, phaseOf(item)).action === 'join') {
    joinQueue(id);
    return;
  }
  if (session && item && !item.waitingRoom && !inFlight.has(id)) {
    const price = formatPrice(item.priceCents);
    const sure = await confirmDialog({
      title: `Buy ${item.name} for ${price}?`,
      text: 'One unit. Once bought, you have a while to pay; an unpaid order expires and the unit goes back on sale.',
      yes: `Buy for ${price}`,
      no: 'Not now',
      tone: 'primary',
    });
    if (!sure) return;
  }
  buy(id);
}

function renderAllCards() {
  for (const id of cards.keys()) renderCard(id);
}

/** A card leaves the page (its sale ended, or the listing no longer has it). */
function dropCard(id) {
  const card = cards.get(id);
  if (card) card.li.remove();
  cards.delete(id);
  items.delete(id);
  dropPanel(id);
  ui.itemsEmpty.hidden = cards.size > 0;
}

let itemsRequest = 0;
let itemsApplied = 0;
async function loadItems() {
  const mine = ++itemsRequest;
  const result = await api('/api/items');
  // Answers can overtake each other (poll + refresh after a purchase): keep the newest.
  if (mine < itemsApplied) return;
  itemsApplied = mine;
  ui.items.setAttribute('aria-busy', 'false');
  if (!result.ok) {
    announce(ui.itemsError, `Could not load the sale: ${result.error.message}`, 'error');
    ui.itemsStatus.textContent = 'Retrying…';
    return;
  }
  announce(ui.itemsError, '');
  // The shop shows what is on sale or still to come; an ended sale is over for shoppers.
  const all = Array.isArray(result.data && result.data.items) ? result.data.items : [];
  const list = all.filter((item) => inShop(item));
  const seen = new Set();
  // Keyed update: cards keep their elements (focus, in-flight state, outcome) across polls.
  for (const item of list) {
    seen.add(item.id);
    items.set(item.id, item);
    knownNames.set(item.id, item.name);
    if (!cards.has(item.id)) cards.set(item.id, createCard(item));
    if (item.waitingRoom) {
      resumeQueue(item.id);
      queueOpensAt(item.id, item.queueOpensAt);
    }
    renderCard(item.id);
  }
  keepInOrder(ui.items, list.map((item) => cards.get(item.id).li));
  for (const id of [...cards.keys()]) {
    if (!seen.has(id) && !inFlight.has(id)) dropCard(id);
  }
  ui.itemsEmpty.hidden = cards.size > 0;
  ui.itemsStatus.textContent = `Stock updated ${formatClock(Date.now())}`;
}

// Countdowns (the start, the time left to pay, the limiter's wait) and phase changes
// between polls.
setInterval(() => {
  const now = Date.now();
  let due = false;
  for (const [id, until] of refusedUntil) {
    if (until > now) continue;
    refusedUntil.delete(id);
    const card = cards.get(id);
    if (card && !card.outcome.hidden && card.outcome.classList.contains('tone-warn')) {
      announce(card.outcome, 'You can try again now.', 'info');
    }
  }
  for (const [id, item] of items) {
    if (!inShop(item, now) && !inFlight.has(id)) {
      dropCard(id);
      continue;
    }
    const order = liveOrders.get(id);
    if (order && order.state === OrderState.PENDING_PAYMENT.word && Date.parse(order.payBy) <= now) due = true;
    renderCard(id);
  }
  if (tickCountdowns() || due) loadOrdersSoon();
}, 1000);

// --- purchases ----------------------------------------------------------------------

/** Said when no answer the page understands came back: the order may exist. */
const UNCONFIRMED =
  'We could not confirm your purchase: an order may have been placed. Check My orders; trying again is safe, it will not buy twice.';

/**
 * Whether an answer leaves it open that an order was placed: no answer at all, an answer
 * that is not the API's (a proxy's 502 page), or a server error the API does not explain.
 * The answers that say no order was made (ORDER_FAILED, LIMITER_UNAVAILABLE, OVERLOADED,
 * ORDERS_UNAVAILABLE) are not.
 */
const NO_ORDER = new Set([
  ErrorCode.ORDER_FAILED,
  ErrorCode.LIMITER_UNAVAILABLE,
  ErrorCode.OVERLOADED,
  ErrorCode.ORDERS_UNAVAILABLE,
]);

function unconfirmed(result) {
  if (result.ok || result.status === 202) return false;
  const { code } = result.error;
  if (result.status === 0 || code.startsWith('HTTP_')) return true;
  return result.status >= 500 && !NO_ORDER.has(code);
}

/** The outcome of a purchase in words, and its tone. */
function describe(result, item) {
  const name = item ? item.name : 'this item';
  if (result.status === 202) {
    return [
      `Your order for ${name} is being confirmed (order id ${result.data.orderId}). It will appear in My orders within a minute; pressing Buy now again is safe.`,
      'info',
    ];
  }
  if (result.ok) {
    return [`Order placed for ${name}. Order id: ${result.data.orderId}`, 'ok'];
  }
  if (unconfirmed(result)) {
    const why =
      result.status === 0
        ? 'No answer reached this page.'
        : `The server answered with an error, HTTP ${result.status}.`;
    return [`${UNCONFIRMED} (${why})`, 'error'];
  }
  const { code, message } = result.error;
  switch (code) {
    case ErrorCode.RATE_LIMITED: {
      const wait = retryAfterMs(result);
      const when =
        wait === null
          ? 'Please wait a moment before trying again.'
          : `You can try again in ${formatWait(wait)} (at ${formatClock(Date.now() + wait)}).`;
      return [`${sentence(message)} ${when}`, 'warn'];
    }
    case Outcome.SOLD_OUT.code:
      return [`${Outcome.SOLD_OUT.label}: ${name} has no stock left.`, 'error'];
    case Outcome.ALREADY_PURCHASED.code:
      return [`${Outcome.ALREADY_PURCHASED.label}: you have already bought ${name}. One per customer.`, 'warn'];
    case Outcome.NOT_STARTED.code:
      return [`${Outcome.NOT_STARTED.label}: the sale of ${name} has not started yet.`, 'warn'];
    case Outcome.PAUSED.code:
      return [`${Outcome.PAUSED.label}: the sale of ${name} is paused. Please try again later.`, 'warn'];
    case Outcome.ENDED.code:
      return [`${Outcome.ENDED.label}: the sale of ${name} has ended.`, 'error'];
    case ErrorCode.PRICE_CHANGED:
      return [`Nothing was bought: the price of ${name} changed to ${formatPrice(result.error.priceCents)}. Check it and buy again if you still want it.`, 'warn'];
    case ErrorCode.NOT_ADMITTED:
      return [`Not your turn: ${name} is sold through a queue, and this purchase carried no valid pass (it may have run out). The queue panel shows your place.`, 'warn'];
    case ErrorCode.BLOCKED:
      return ['Purchases from this account or address are blocked for now. Contact support if you think this is a mistake.', 'error'];
    case ErrorCode.IDEMPOTENCY_IN_PROGRESS:
      return ['Your earlier purchase request is still being processed. Check My orders in a moment.', 'warn'];
    case ErrorCode.ITEM_NOT_FOUND:
      return [`${name} is no longer on sale.`, 'error'];
    case ErrorCode.UNAUTHENTICATED:
      return ['Your session has expired. Please sign in again.', 'warn'];
    case ErrorCode.LIMITER_UNAVAILABLE:
    case ErrorCode.ORDER_FAILED:
    case ErrorCode.OVERLOADED:
    case ErrorCode.ORDERS_UNAVAILABLE:
    {
      const text = sentence(message);
      return [`No order was placed. ${/try again|retry/i.test(text) ? text : `${text} Please try again.`}`, 'error'];
    }
    default:
      return [message, 'error'];
  }
}

async function buy(id) {
  // One purchase per item at a time: a double click sends one request.
  if (inFlight.has(id) || !session) return;
  const item = items.get(id);
  const card = cards.get(id);
  inFlight.add(id);
  renderCard(id);
  announce(card.outcome, `Buying ${item ? item.name : 'the item'}…`, 'info');

  // A purchase that got no answer is retried with the same key, so it cannot buy twice.
  const key = unansweredKeys.get(id) || newIdempotencyKey();
  unansweredKeys.set(id, key);
  // An item with a waiting room lets through only a purchase with the pass of a place.
  const pass = queuePass(id);
  const result = await api('/seckill', {
    method: 'POST',
    token: session.token,
    headers: pass ? { 'Idempotency-Key': key, 'Queue-Pass': pass } : { 'Idempotency-Key': key },
    body: { itemId: id },
  });
  // An answer settles the key, except one that leaves the order open (no answer, not the
  // API's, a server error) and "being confirmed" (202): a retry with the same key is
  // answered from the order once its commit lands.
  if (!unconfirmed(result) && result.status !== 202 && result.status < 500) unansweredKeys.delete(id);

  inFlight.delete(id);
  if (pass) purchased(id, result);
  const [text, tone] = describe(result, item);
  const current = cards.get(id);
  if (current) announce(current.outcome, text, tone);
  if (result.status === 401) {
    sessionExpired();
  } else if (result.status === 202) {
    setTimeout(loadOrders, 5000);
  } else if (result.ok) {
    if (result.data && result.data.orderId) liveOrders.set(id, { ...result.data, itemId: id });
    loadOrders();
  } else if (result.error.code === ErrorCode.RATE_LIMITED) {
    const wait = retryAfterMs(result);
    if (wait !== null) refusedUntil.set(id, Date.now() + wait);
  } else if (result.error.code === Outcome.ALREADY_PURCHASED.code || unconfirmed(result)) {
    // The order the server knows of (or that may have landed) shows on the card.
    loadOrders();
  }
  renderCard(id);
  loadItems();
}

// --- the order on the card: pay, cancel ---------------------------------------------

async function payHeld(id) {
  const order = liveOrders.get(id);
  if (!order) return;
  const done = await changeOrder(order.orderId, 'pay', cards.get(id)?.outcome);
  if (done) {
    const card = cards.get(id);
    if (card) announce(card.outcome, `Paid: ${knownNames.get(id) || 'the item'} is yours.`, 'ok');
  }
}

async function cancelHeld(id) {
  const order = liveOrders.get(id);
  if (!order) return;
  const name = knownNames.get(id) || 'this item';
  const done = await cancelOrder(order.orderId, name, cards.get(id)?.outcome);
  if (done) {
    const card = cards.get(id);
    if (card) announce(card.outcome, `Order cancelled: the unit of ${name} is back on sale.`, 'info');
  }
}

/** Cancels an order once the shopper has said yes in the page's own confirmation. */
async function cancelOrder(orderId, name, line) {
  const sure = await confirmDialog({
    title: `Cancel your order of ${name}?`,
    text: 'The unit goes back on sale at once, and someone else may buy it. This cannot be undone.',
    yes: 'Cancel the order',
    no: 'Keep the order',
  });
  return sure ? changeOrder(orderId, 'cancel', line) : false;
}

/**
 * Pays or cancels an order; a payment carries an Idempotency-Key so a retry is safe.
 * A refusal is said on `line` (the card's outcome, or My orders'). True when done.
 */
async function changeOrder(orderId, what, line = ui.ordersError) {
  if (!session || changing.has(orderId)) return false;
  changing.add(orderId);
  renderAllCards();
  const headers = what === 'pay' ? { 'Idempotency-Key': `pay-${orderId}` } : {};
  const result = await api(`/api/orders/${encodeURIComponent(orderId)}/${what}`, {
    method: 'POST',
    token: session.token,
    headers,
  });
  changing.delete(orderId);
  if (result.ok && result.data) {
    const order = result.data;
    if (isLiveOrder(order)) liveOrders.set(order.itemId, order);
    else if (liveOrders.get(order.itemId)?.orderId === order.orderId) liveOrders.delete(order.itemId);
  } else if (result.status === 401) {
    sessionExpired();
    return false;
  } else if (line) {
    const text =
      result.error.code === ErrorCode.ORDER_STATE
        ? `This order is ${orderStateLabel(result.error.state).toLowerCase()} now: nothing was changed.`
        : result.status === 0 || result.error.code.startsWith('HTTP_')
          ? `We could not confirm that: ${result.error.message} My orders shows where the order stands.`
          : result.error.message;
    announce(line, text, 'error');
  }
  renderAllCards();
  await loadOrders();
  return result.ok;
}

// --- my orders ----------------------------------------------------------------------

let ordersRequest = 0;
async function loadOrders() {
  if (!session) return;
  const mine = ++ordersRequest;
  const result = await api('/api/orders/mine', { token: session.token });
  if (mine !== ordersRequest || !session) return;
  if (!result.ok) {
    if (result.status === 401) {
      sessionExpired();
      return;
    }
    announce(ui.ordersError, `Could not load your orders: ${result.error.message}`, 'error');
    return;
  }
  announce(ui.ordersError, '');
  const orders = Array.isArray(result.data && result.data.orders) ? result.data.orders : [];
  // Newest first: an item's newest live order is the one its card shows.
  liveOrders.clear();
  for (const order of orders) {
    if (!isLiveOrder(order) || liveOrders.has(order.itemId)) continue;
    liveOrders.set(order.itemId, order);
    // The purchase landed: a key kept for its retry must not answer a later purchase.
    unansweredKeys.delete(order.itemId);
  }
  ui.orders.replaceChildren(...orders.map(orderRow));
  ui.ordersEmpty.hidden = orders.length > 0;
  tickCountdowns();
  renderAllCards();
}

/** A deadline just passed: the list again, once, a moment later (the sweeper's turn). */
let reloadTimer = null;
function loadOrdersSoon() {
  if (reloadTimer !== null) return;
  reloadTimer = setTimeout(() => {
    reloadTimer = null;
    loadOrders();
  }, 2000);
}

/** One order: its state, and for an unpaid one the time left to pay and its buttons. */
function orderRow(order) {
  const pending = order.state === OrderState.PENDING_PAYMENT.word;
  const name = order.itemName || knownNames.get(order.itemId) || `Item #${order.itemId}`;
  return el(
    'li',
    { class: 'order', dataset: { orderId: order.orderId, state: order.state } },
    el('span', { class: 'order-item', text: name }),
    el('span', { class: 'order-id' }, 'Order ', el('code', { text: order.orderId })),
    el('span', { class: `order-state state-${order.state}`, text: orderStateLabel(order.state) }),
    pending && order.payBy
      ? el('span', { class: 'order-countdown small', dataset: { payBy: order.payBy }, role: 'timer' })
      : null,
    pending
      ? el(
          'span',
          { class: 'order-actions' },
          el('button', { type: 'button', class: 'button', text: 'Pay', onclick: () => changeOrder(order.orderId, 'pay') }),
          el('button', {
            type: 'button',
            class: 'button button-quiet',
            text: 'Cancel',
            onclick: () => cancelOrder(order.orderId, name, ui.ordersError),
          }),
        )
      : null,
    el('time', { class: 'muted small', datetime: order.createdAt, text: formatDayClock(order.createdAt) }),
  );
}

/** Time left to pay in My orders; true when a deadline has passed. */
function tickCountdowns() {
  let due = false;
  for (const node of ui.orders.querySelectorAll('.order-countdown')) {
    const left = Math.max(0, Math.floor((Date.parse(node.dataset.payBy) - Date.now()) / 1000));
    node.textContent = left > 0 ? `Pay within ${Math.floor(left / 60)}:${String(left % 60).padStart(2, '0')}` : 'Payment time is up';
    due ||= left === 0;
  }
  return due;
}

ui.ordersRefresh.addEventListener('click', loadOrders);

// --- start --------------------------------------------------------------------------

setupQueues({
  changed: renderCard,
  unauthenticated: sessionExpired,
  turnCame,
  nameOf: (id) => (items.has(id) ? items.get(id).name : `item ${id}`),
});
setShopper(session);
renderSession();
poll(async () => {
  await loadItems();
}, ITEMS_EVERY_MS);
if (session) loadOrders();
// Another tab signed in or out.
window.addEventListener('storage', (event) => {
  if (event.key !== SESSION_KEY) return;
  session = loadSession();
  setShopper(session);
  renderSession();
  renderAllCards();
  if (session) loadOrders();
});
