// A shopper's places in the items' waiting rooms: joining, checking the place at the
// pace the server asks (never faster), the pass that lets a purchase through, and the
// queue panel on the item's card. The ticket is kept in this tab's sessionStorage per
// user and item, so a reload keeps the place: the page asks about it at once and says
// "You kept your place" (so does a join that answers a place kept from an earlier tab).
import { api, retryAfterMs } from './api.js';
import { announce, el } from './dom.js';
import { formatClock, formatCountdown, formatNumber, formatWait, sentence } from './format.js';
import { ClosedReason, ErrorCode, Outcome, Phase, QueueState, queueStateOf } from './words.js';

const STORAGE_PREFIX = 'seckill.queue';
/** Until the server has said how often to ask (it says at least 6 s). */
const DEFAULT_REFRESH_S = 6;
/**
 * The least gap between two checks of a place: the server refills a ticket's poll budget
 * at one a second, so a reload (or many) asks at once without running it dry.
 */
const MIN_GAP_MS = 1000;

/**
 * item id → the place of the signed-in shopper:
 *   { ticket, aheadAtJoin, lastCheckedAt (wall clock, kept across a reload), everyMs
 *     (the pace asked), dueAt (performance.now(): a clock set by hand moves no check), timer,
 *     state (a QueueState; null until the first answer, or after a refused pass),
 *     answer (the last one), pass, passExpiresAt, trouble (why the last check failed),
 *     kept (the place was there before this page took it up: a reload, another tab) }
 */
const places = new Map();
/** item id → what stops a join for now: { until (ms), why: 'not-open' | 'rate-limited' }. */
const holds = new Map();
/** item id → a join on the wire. */
const joining = new Set();
/** item id → the card's queue panel: { box, status, figures, …its parts }. */
const panels = new Map();

/** The shopper whose places these are: { token, userId } or null. */
let shopper = null;
let hooks = { changed() {}, unauthenticated() {}, turnCame() {}, nameOf: (id) => `item ${id}` };

/**
 * app.js's hooks: a card to redraw, a session the server no longer accepts, a shopper's
 * turn that came (on a check), names.
 */
export function setupQueues(given) {
  hooks = { ...hooks, ...given };
}

// --- the ticket, kept per tab --------------------------------------------------------

const storageKey = (id) => `${STORAGE_PREFIX}.${shopper.userId}.${id}`;

function loadStored(id) {
  try {
    const saved = JSON.parse(sessionStorage.getItem(storageKey(id)) || 'null');
    return saved && typeof saved.ticket === 'string' ? saved : null;
  } catch {
    return null;
  }
}

function store(id, place) {
  const { ticket, aheadAtJoin, lastCheckedAt, everyMs } = place;
  try {
    sessionStorage.setItem(storageKey(id), JSON.stringify({ ticket, aheadAtJoin, lastCheckedAt, everyMs }));
  } catch {
    // A full or disabled storage costs the place at a reload, nothing more.
  }
}

function forget(id) {
  const place = places.get(id);
  if (place) clearTimeout(place.timer);
  places.delete(id);
  if (shopper) sessionStorage.removeItem(storageKey(id));
}

/** Signs a shopper in (their kept places come back as their items are listed) or out. */
export function setShopper(session) {
  for (const place of places.values()) clearTimeout(place.timer);
  if (!session && shopper) {
    // Signing out gives the places up: nobody in this tab can use them any more.
    const mine = `${STORAGE_PREFIX}.${shopper.userId}.`;
    const keys = Array.from({ length: sessionStorage.length }, (_, i) => sessionStorage.key(i));
    for (const key of keys) if (key && key.startsWith(mine)) sessionStorage.removeItem(key);
  }
  places.clear();
  holds.clear();
  shopper = session ? { token: session.token, userId: session.userId } : null;
  for (const id of panels.keys()) renderPanel(id);
}

/**
 * An item with a waiting room is listed: takes up the place this tab kept for it, with
 * its next check when it is due (a reload does not ask sooner than the server wants).
 */
export function resumeQueue(id) {
  if (!shopper || places.has(id) || joining.has(id)) return;
  const saved = loadStored(id);
  if (!saved) return;
  const place = {
    ticket: saved.ticket,
    aheadAtJoin: Number.isInteger(saved.aheadAtJoin) ? saved.aheadAtJoin : null,
    lastCheckedAt: Number(saved.lastCheckedAt) || 0,
    everyMs: Number(saved.everyMs) || DEFAULT_REFRESH_S * 1000,
    state: null,
    answer: null,
    kept: true,
  };
  places.set(id, place);
  // At once, so the shopper sees the kept place now, not an interval later; reloads in a
  // row ask no faster than the poll budget refills.
  schedule(id, place, Math.min(MIN_GAP_MS, place.lastCheckedAt + MIN_GAP_MS - Date.now()));
  changed(id);
}

/**
 * The listing's `queueOpensAt`: until then the button counts down instead of offering a
 * join the server would refuse (QUEUE_NOT_OPEN).
 */
export function queueOpensAt(id, at) {
  const opensAt = Date.parse(at);
  if (!Number.isFinite(opensAt) || opensAt <= Date.now() || places.has(id)) return;
  holds.set(id, { until: opensAt, why: 'not-open' });
}

// --- joining and checking ------------------------------------------------------------

/** Joins the item's queue (joining again answers the same place). */
export async function joinQueue(id) {
  if (!shopper || joining.has(id)) return;
  const token = shopper.token;
  joining.add(id);
  holds.delete(id);
  forget(id);
  changed(id);
  const result = await api(`/api/items/${id}/queue`, { method: 'POST', token });
  joining.delete(id);
  if (!shopper || shopper.token !== token) return;
  if (result.ok && result.data && typeof result.data.ticket === 'string') {
    const place = {
      ticket: result.data.ticket,
      aheadAtJoin: null,
      lastCheckedAt: Date.now(),
      everyMs: refreshMs(result.data),
      state: null,
      answer: null,
      // The join answered the place this user had (from another tab, or before a reload
      // that lost this tab's storage): it was kept.
      kept: result.data.rejoined === true,
    };
    places.set(id, place);
    take(id, place, result.data);
    sayState(id, place);
  } else {
    refusedJoin(id, result);
  }
  changed(id);
}

function refusedJoin(id, result) {
  const { code, message } = result.error;
  const name = hooks.nameOf(id);
  if (result.status === 401) {
    hooks.unauthenticated();
    return;
  }
  if (code === ErrorCode.QUEUE_NOT_OPEN) {
    const opensAt = Date.parse(result.error.opensAt);
    if (Number.isFinite(opensAt)) {
      holds.set(id, { until: opensAt, why: 'not-open' });
      say(id, `The queue for ${name} opens at ${formatClock(opensAt)}. Join then.`, 'warn');
    } else {
      say(id, `The queue for ${name} is not open yet.`, 'warn');
    }
  } else if (code === ErrorCode.QUEUE_CLOSED) {
    say(id, `The queue for ${name} is closed: the sale has ended or no longer needs a queue.`, 'error');
  } else if (code === ErrorCode.ROOM_CLOSED) {
    say(id, `${name} is sold out and the queue has ended: no unit can come back.`, 'error');
  } else if (code === Outcome.SOLD_OUT.code) {
    say(id, `${Outcome.SOLD_OUT.label}: ${name} has no stock left.`, 'error');
  } else if (code === ErrorCode.RATE_LIMITED || result.status === 429) {
    const wait = retryAfterMs(result) ?? 5000;
    holds.set(id, { until: Date.now() + wait, why: 'rate-limited' });
    say(id, `${sentence(message)} You can try again in ${formatWait(wait)}.`, 'warn');
  } else {
    say(id, `Could not join the queue: ${message}`, 'error');
  }
}

/** Asks for the place's state when it is due, `delay` ms from now (0: now). */
function schedule(id, place, delay) {
  clearTimeout(place.timer);
  place.dueAt = performance.now() + Math.max(0, delay);
  place.timer = setTimeout(() => check(id), Math.max(0, delay));
}

/** The pace the server asked for, in ms. */
const refreshMs = (answer) => {
  const s = Number(answer && answer.refreshIntervalSeconds);
  return (Number.isFinite(s) && s > 0 ? s : DEFAULT_REFRESH_S) * 1000;
};

async function check(id) {
  const place = places.get(id);
  if (!place || !shopper || place.checking) return;
  const token = shopper.token;
  place.checking = true;
  clearTimeout(place.timer);
  const result = await api(`/api/items/${id}/queue`, { token, headers: { 'Queue-Ticket': place.ticket } });
  place.checking = false;
  if (places.get(id) !== place || !shopper || shopper.token !== token) return;
  place.lastCheckedAt = Date.now();
  let turnCame = false;
  if (result.ok && result.data) {
    place.trouble = null;
    const before = place.state;
    const wasDrawn = isDrawn(place.answer);
    take(id, place, result.data);
    // The place moved on from the state it was kept in: that news is old.
    if (place.state !== before && before !== null) place.kept = false;
    // The header follows the state, and the draw ("drawn soon" no longer holds).
    if (place.state !== before || isDrawn(place.answer) !== wasDrawn) sayState(id, place);
    turnCame = place.state !== before && place.state === QueueState.ADMITTED;
  } else if (result.status === 401) {
    hooks.unauthenticated();
    return;
  } else if (result.error.code === ErrorCode.INVALID_TICKET || result.error.code === ErrorCode.VALIDATION_FAILED) {
    forget(id);
    say(id, `Your place in the queue for ${hooks.nameOf(id)} could not be found. Join again for a new one.`, 'error');
  } else {
    // No answer, or not one about the place: keep it and ask again at the usual pace
    // (a place not asked about for a while is given up, so never stop asking); polled
    // too fast (a burst of reloads), ask again when the server says.
    const asked = result.status === 429 ? retryAfterMs(result) : null;
    const wait = asked !== null ? Math.max(asked, MIN_GAP_MS) : place.everyMs;
    place.trouble = `Could not check your place (${result.error.message.replace(/[.\s]+$/, '')}). Trying again in ${formatWait(wait)}.`;
    schedule(id, place, wait);
  }
  changed(id);
  // After the card is redrawn, so its Buy is there to take the focus.
  if (turnCame) hooks.turnCame(id);
}

/** Whether an answer gives the place its number (`position` is null until the draw). */
const isDrawn = (answer) => Boolean(answer) && Number.isInteger(answer.position);

/** Takes in an answer about the place (the join's or a check's). */
function take(id, place, answer) {
  const state = queueStateOf(answer.state) || null;
  place.answer = answer;
  place.state = state;
  place.everyMs = refreshMs(answer);
  if (Number.isInteger(answer.ahead) && place.aheadAtJoin === null) place.aheadAtJoin = answer.ahead;
  if (state === QueueState.ADMITTED && typeof answer.pass === 'string') {
    place.pass = answer.pass;
    place.passExpiresAt = Date.parse(answer.passExpiresAt);
  } else if (state !== QueueState.ADMITTED) {
    place.pass = null;
    place.passExpiresAt = null;
  }
  if (state && state.final) {
    // Nothing more will happen to this place: stop asking, forget the ticket.
    clearTimeout(place.timer);
    sessionStorage.removeItem(storageKey(id));
    return;
  }
  store(id, place);
  schedule(id, place, place.everyMs);
}

// A tab in the background has its timers slowed by the browser: back in front, a check
// that fell due meanwhile is made now.
document.addEventListener('visibilitychange', () => {
  if (document.hidden) return;
  for (const [id, place] of places) {
    if (place.dueAt && place.dueAt <= performance.now() && !place.checking && !(place.state && place.state.final)) check(id);
  }
});

// --- what the card does with it --------------------------------------------------------

/** The pass to send with a purchase of the item, or null. */
export function queuePass(id) {
  const place = places.get(id);
  return place && place.state === QueueState.ADMITTED && place.pass ? place.pass : null;
}

/**
 * The card's main button for an item with a waiting room: { label, action } where
 * action is 'join', 'buy' or null (disabled). `phase`: where the sale stands (words.js).
 */
export function queueButton(id, phase) {
  const place = places.get(id);
  const now = Date.now();
  if (joining.has(id)) return { label: 'Joining the queue…', action: null };
  // A paused or ended sale refuses whatever the place; the listing's "sold out" does not
  // count for a place (a unit may come back to it, and the queue says so itself).
  if (phase === Phase.PAUSED || phase === Phase.ENDED) return { label: phase.refusal.label, action: null };
  if (place && place.state !== QueueState.EXPIRED && place.state !== QueueState.CLOSED) {
    if (place.state === QueueState.ADMITTED) {
      if (place.passExpiresAt <= now) return { label: 'Your turn has passed', action: null };
      return { label: 'Buy now', action: 'buy' };
    }
    if (place.state === QueueState.SOLD_OUT) return { label: Outcome.SOLD_OUT.label, action: null };
    return { label: 'Waiting for your turn…', action: null };
  }
  // Not in the queue: joining opens with the sale (or with a pre-queue before it, which
  // only the server knows of: it answers QUEUE_NOT_OPEN with the time).
  if (phase === Phase.SOLD_OUT) return { label: phase.refusal.label, action: null };
  const hold = holds.get(id);
  if (hold && hold.until > now) {
    const left = formatCountdown(hold.until - now);
    return { label: hold.why === 'not-open' ? `Queue opens in ${left}` : `Try again in ${left}`, action: null };
  }
  return { label: place && place.state === QueueState.EXPIRED ? 'Join the queue again' : 'Join the queue', action: 'join' };
}

/**
 * What a purchase with the pass came to: a bought item (or one already bought) ends the
 * place; a refused pass is dropped, and the next check says what became of the place.
 */
export function purchased(id, result) {
  const code = result.ok ? null : result.error.code;
  if (result.ok || result.status === 202 || code === Outcome.ALREADY_PURCHASED.code) {
    forget(id);
    const p = panels.get(id);
    if (p) announce(p.status, '');
  } else if (code === ErrorCode.NOT_ADMITTED) {
    const place = places.get(id);
    if (place) {
      place.pass = null;
      place.passExpiresAt = null;
      place.state = null;
    }
  }
  changed(id);
}

// --- the panel -----------------------------------------------------------------------

/** The queue panel of an item's card (hidden while the shopper has no place). */
export function queuePanel(id) {
  const p = {};
  p.status = el('p', { class: 'queue-status', role: 'status', 'aria-live': 'polite', 'aria-atomic': 'true', hidden: true });
  p.kept = el('p', { class: 'queue-kept small', 'aria-live': 'polite', hidden: true });
  // The pass's countdown for screen readers: said at the turn and then now and again
  // (passSaying), where the visible timer changes every second.
  p.spoken = el('p', { class: 'queue-spoken visually-hidden', 'aria-live': 'polite', 'aria-atomic': 'true' });
  p.place = el('dd', { class: 'queue-place' });
  p.ahead = el('dd', { class: 'queue-ahead' });
  p.wait = el('dd', { class: 'queue-wait' });
  p.progress = el('progress', { class: 'queue-progress', max: 1, value: 0, 'aria-label': 'Your progress through the queue' });
  p.progressText = el('span', { class: 'queue-progress-text small muted' });
  p.detail = el('p', { class: 'queue-detail small' });
  p.stale = el('p', { class: 'queue-stale small', hidden: true });
  p.message = el('p', { class: 'queue-message small', hidden: true });
  p.checked = el('p', { class: 'queue-checked small muted' });
  p.aheadRow = el('div', {}, el('dt', { text: 'Ahead of you' }), p.ahead);
  p.waitRow = el('div', { class: 'queue-wait-row' }, el('dt', { text: 'Estimated wait' }), p.wait);
  p.bar = el('div', { class: 'queue-bar' }, p.progress, p.progressText);
  p.figures = el(
    'div',
    { class: 'queue-figures' },
    el('dl', {}, el('div', {}, el('dt', { text: 'Your place' }), p.place), p.aheadRow, p.waitRow),
    p.bar,
  );
  p.box = el(
    'section',
    { class: 'queue', 'aria-label': `Queue for ${hooks.nameOf(id)}`, hidden: true },
    p.status,
    p.kept,
    p.message,
    p.figures,
    p.detail,
    p.stale,
    p.checked,
    p.spoken,
  );
  panels.set(id, p);
  renderPanel(id);
  return p.box;
}

/** A card left the page: its panel goes (the place stays until the item comes back). */
export function dropPanel(id) {
  panels.delete(id);
}

function say(id, text, tone) {
  const p = panels.get(id);
  if (!p) return;
  p.box.hidden = false;
  announce(p.status, text, tone);
}

/** A sentence about a state, said when the state changes (read out by screen readers). */
function sayState(id, place) {
  const name = hooks.nameOf(id);
  const a = place.answer || {};
  switch (place.state) {
    case QueueState.ADMITTED:
      say(id, `It is your turn: buy ${name} now, before your pass runs out.`, 'ok');
      break;
    case QueueState.SOLD_OUT:
      say(id, `${Outcome.SOLD_OUT.label}: every unit of ${name} is taken for now.`, 'error');
      break;
    case QueueState.EXPIRED:
      say(id, 'Your place has expired: the page could not check in for too long, or your turn passed without a purchase. Join again for a new place.', 'error');
      break;
    case QueueState.CLOSED:
      say(id, closedSentence(name, a), 'error');
      break;
    case QueueState.WAITING:
      say(id, placeSentence(place), 'info');
      break;
    default:
      if (place.answer && a.state !== undefined && !queueStateOf(a.state)) {
        say(id, `The server answered a queue state this page does not know (${a.state}).`, 'warn');
      } else {
        say(id, 'Checking your place in the queue…', 'info');
      }
  }
}

function placeSentence(place) {
  const a = place.answer || {};
  // Not drawn yet: when, unless it is within the minute (a pre-queue's draw is at the start).
  const draws = Date.parse(a.drawsAt);
  const later = Number.isFinite(draws) && draws - Date.now() > 60_000;
  const drawn = Number.isInteger(a.position) ? '' : later ? ` Your place is drawn at ${formatClock(draws)}.` : ' Your place is drawn soon.';
  return `You are in the queue. Keep this page open: it checks your place for you.${drawn}`;
}

/**
 * What the stock means for a drawn, waiting place: `likely` true, the stock should reach
 * it; false, how far past the units no pass holds it is and what could still bring one
 * back; null (not known), nothing.
 */
function oddsText(a) {
  if (a.likely === true) return 'At this pace, there should still be stock when your turn comes.';
  if (a.likely !== false) return '';
  const back = 'A unit comes back if a pass runs out or an order goes unpaid.';
  const past = Number(a.pastStock);
  const free = Number(a.unitsFree);
  if (!Number.isInteger(past) || past < 1 || !Number.isInteger(free)) return `Stock may run out before your turn comes. ${back}`;
  const places = past === 1 ? '1 place' : `${formatNumber(past)} places`;
  if (free === 0) return `You are ${places} past the stock: no unit is free now. ${back}`;
  const units = free === 1 ? '1 unit' : `${formatNumber(free)} units`;
  return `You are ${places} past the ${units} still free. ${back}`;
}

/**
 * Why the queue ended, from a `closed` answer: "Sold out at 18:05 — the queue has ended"
 * (the server says when), or the sale's end, or the room turned off.
 */
function closedSentence(name, a) {
  const at = Date.parse(a.closedAt);
  const when = Number.isFinite(at) ? ` at ${formatClock(at)}` : '';
  switch (a.closedReason) {
    case ClosedReason.SOLD_OUT.word:
      return `Sold out${when} — the queue for ${name} has ended.`;
    case ClosedReason.ENDED.word:
      return `The sale of ${name} ended${when} — the queue has ended.`;
    case ClosedReason.OFF.word:
      return `The queue for ${name} is closed: the sale no longer needs a queue.`;
    default:
      return `The queue for ${name} is closed: the sale has ended or no longer needs a queue.`;
  }
}

/** What may still come of a sold-out sale for a place: units held by unpaid orders, until when. */
function soldOutDetail(a) {
  const back = Number(a.mayReturn);
  const until = Date.parse(a.mayReturnUntil);
  if (back > 0) {
    const units = back === 1 ? '1 unit is' : `${formatNumber(back)} units are`;
    const when = Number.isFinite(until) ? ` A unit may come back until ${formatClock(until)}; your place still counts.` : ' If they are not paid, they come back; your place still counts.';
    return `${units[0].toUpperCase()}${units.slice(1)} held by orders not paid yet.${when}`;
  }
  return 'No unit is held by an unpaid order: the queue ends unless a purchase in progress gives one back.';
}

/** The operator's message to everyone waiting, as text (never HTML). */
function showMessage(p, a) {
  const message = typeof a.message === 'string' ? a.message : '';
  p.message.textContent = message;
  p.message.hidden = !message;
}

/**
 * The wait, told only to a place the stock should reach (`likely` true): null for a
 * place past the stock or one whose odds are unknown (not drawn yet), which see no wait.
 */
function waitText(a) {
  if (a.likely !== true) return null;
  const s = Number(a.waitSeconds);
  if (a.waitSeconds === null || a.waitSeconds === undefined || !Number.isFinite(s)) return 'Not known yet';
  if (s <= 0) return 'Any moment now';
  const low = Number(a.waitSecondsP25);
  const high = Number(a.waitSecondsP75);
  const range =
    Number.isFinite(low) && Number.isFinite(high) && a.waitSecondsP25 !== null && a.waitSecondsP75 !== null && high > low
      ? ` (likely ${formatWait(low * 1000)} – ${formatWait(high * 1000)})`
      : '';
  return `About ${formatWait(s * 1000)}${range}`;
}

function renderPanel(id) {
  const p = panels.get(id);
  if (!p) return;
  const place = shopper ? places.get(id) : null;
  if (!shopper) {
    announce(p.status, '');
    p.box.hidden = true;
    renderTurn(id, p, null);
    return;
  }
  if (!place) {
    // No place: only a message (a refused join, a lost place) may remain.
    p.figures.hidden = true;
    p.detail.hidden = true;
    p.message.hidden = true;
    p.stale.hidden = true;
    p.checked.hidden = true;
    p.box.hidden = p.status.hidden;
    p.box.dataset.queueState = 'none';
    renderTurn(id, p, null);
    return;
  }
  const a = place.answer || {};
  const state = place.state;
  const now = Date.now();
  p.box.hidden = false;
  p.box.dataset.queueState = state ? state.word : 'checking';
  if (p.status.hidden) sayState(id, place);
  showMessage(p, a);

  const waiting = state === QueueState.WAITING || (state === null && place.answer !== null);
  p.figures.hidden = !(waiting || state === QueueState.SOLD_OUT);
  const drawn = Number.isInteger(a.position);
  p.place.textContent = drawn ? formatNumber(a.position) : 'Not drawn yet';
  p.place.dataset.drawn = drawn ? 'yes' : 'no';
  p.ahead.textContent = Number.isInteger(a.ahead) ? formatNumber(a.ahead) : '–';
  const wait = waitText(a);
  p.wait.textContent = wait ?? '';
  const start = place.aheadAtJoin;
  const done = Number.isInteger(a.ahead) && Number.isInteger(start) ? (start > 0 ? Math.max(0, start - a.ahead) / start : 1) : 0;
  p.progress.value = done;
  p.progressText.textContent = `${Math.round(done * 100)} %`;
  // Sold out, a place has no one ahead to count and no wait to estimate: only the place.
  p.aheadRow.hidden = !waiting;
  p.waitRow.hidden = !waiting || wait === null;
  p.bar.hidden = !waiting || !Number.isInteger(start) || !Number.isInteger(a.ahead);

  let detail = '';
  if (state === QueueState.ADMITTED) {
    const left = place.passExpiresAt - now;
    detail = Number.isFinite(left)
      ? left > 0
        ? `Buy within ${formatCountdown(left)}: your pass is kept for you until ${formatClock(place.passExpiresAt)}.`
        : 'Your pass has run out.'
      : '';
  } else if (waiting && !drawn) {
    const draws = Date.parse(a.drawsAt);
    detail = Number.isFinite(draws) && draws > now
      ? `Places are drawn at random at ${formatClock(draws)} (in ${formatCountdown(draws - now)}): joining early or late until then makes no difference.`
      : 'Places are being drawn at random among those who joined.';
  } else if (waiting) {
    detail = oddsText(a);
  } else if (state === QueueState.SOLD_OUT) {
    detail = soldOutDetail(a);
  }
  p.detail.textContent = detail;
  p.detail.hidden = !detail;
  p.detail.setAttribute('role', state === QueueState.ADMITTED ? 'timer' : 'note');

  p.stale.textContent = 'The queue could not be reached just now: these figures are the last it knew.';
  p.stale.hidden = a.stale !== true;

  const final = state && state.final;
  if (final) p.checked.textContent = '';
  else if (place.trouble) p.checked.textContent = place.trouble;
  else if (place.checking) p.checked.textContent = 'Checking your place…';
  else if (place.dueAt) {
    const next = Math.max(0, Math.ceil((place.dueAt - performance.now()) / 1000));
    const last = place.lastCheckedAt ? `Checked at ${formatClock(place.lastCheckedAt)}. ` : '';
    p.checked.textContent = `${last}Next check ${next > 0 ? `in ${next} s` : 'now'}.`;
  }
  p.checked.hidden = !p.checked.textContent;
  renderTurn(id, p, place);
}

/**
 * What a screen reader is told of an admitted place's pass, and the mark it is said at
 * (null: nothing to say): at the turn, at each whole minute left, at 30 s and 10 s, and
 * when it runs out; never every second.
 */
function passSaying(leftMs, name) {
  const left = Math.ceil(leftMs / 1000);
  if (!Number.isFinite(left)) return null;
  if (left <= 0) return { mark: 0, text: `Your pass to buy ${name} has run out.` };
  const mark = left <= 10 ? 10 : left <= 30 ? 30 : Math.ceil(left / 60) * 60;
  return { mark, text: `${formatWait(Math.min(leftMs, mark * 1000))} left to buy ${name}.` };
}

/** The parts of the panel that tell a returning shopper and a shopper whose turn it is. */
function renderTurn(id, p, place) {
  const state = place ? place.state : null;
  p.kept.textContent = 'You kept your place.';
  p.kept.hidden = !(place && place.kept && state && !state.final);
  const admitted = state === QueueState.ADMITTED && Number.isFinite(place.passExpiresAt);
  const saying = admitted ? passSaying(place.passExpiresAt - Date.now(), hooks.nameOf(id)) : null;
  if (!saying) {
    p.spoken.textContent = '';
    if (place) place.spokenMark = null;
    return;
  }
  if (place.spokenMark === saying.mark) return;
  const first = place.spokenMark === null || place.spokenMark === undefined;
  place.spokenMark = saying.mark;
  p.spoken.textContent = first && saying.mark > 0 ? `Your turn: ${saying.text}` : saying.text;
}

function changed(id) {
  renderPanel(id);
  hooks.changed(id);
}

// Countdowns (pass, draw, next check, a hold on joining) once a second. A pass that runs
// out disables the purchase at once; the next check says what became of the place.
setInterval(() => {
  const now = Date.now();
  for (const id of panels.keys()) {
    if (places.has(id) || holds.has(id)) changed(id);
    const hold = holds.get(id);
    if (hold && hold.until <= now) holds.delete(id);
  }
}, 1000);
