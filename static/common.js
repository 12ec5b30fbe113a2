// Shared by the shopper page and the admin dashboard: the API client, formatting and
// small DOM helpers. Plain ES module, no build step, nothing from outside this origin.

const REQUEST_TIMEOUT_MS = 15000;

/** The currency prices are shown in (the API only knows cents). */
export const CURRENCY = 'USD';

/**
 * Calls the API on this origin. Never throws: resolves to
 *   { ok: true,  status, data, headers }                     on 2xx
 *   { ok: false, status, error: {code, message, …}, headers } otherwise
 * where `error` is the server's JSON envelope; status 0 means no answer at all.
 */
export async function api(path, { method = 'GET', token, body, headers = {} } = {}) {
  const h = { Accept: 'application/json', ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  let payload;
  if (body !== undefined) {
    h['Content-Type'] = 'application/json';
    payload = JSON.stringify(body);
  }
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), REQUEST_TIMEOUT_MS);
  let res;
  try {
    res = await fetch(path, { method, headers: h, body: payload, cache: 'no-store', signal: abort.signal });
  } catch (e) {
    clearTimeout(timer);
    return {
      ok: false,
      status: 0,
      headers: new Headers(),
      error: {
        code: 'NETWORK',
        message: 'Could not reach the server. Check your connection and try again.',
      },
    };
  }
  let data = null;
  try {
    const text = await res.text();
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  } finally {
    clearTimeout(timer);
  }
  if (res.ok) return { ok: true, status: res.status, data, headers: res.headers };
  const error =
    data && typeof data.code === 'string' && typeof data.message === 'string'
      ? data
      : { code: `HTTP_${res.status}`, message: `Unexpected answer from the server (HTTP ${res.status}).` };
  return { ok: false, status: res.status, error, headers: res.headers };
}

/** Milliseconds until a 429 may be retried: the body's retryAfterMs, else Retry-After. */
export function retryAfterMs(result) {
  const fromBody = Number(result.error && result.error.retryAfterMs);
  if (Number.isFinite(fromBody) && fromBody >= 0) return fromBody;
  const header = result.headers && result.headers.get('Retry-After');
  const seconds = Number(header);
  return Number.isFinite(seconds) && header !== null ? seconds * 1000 : null;
}

const moneyFormat = new Intl.NumberFormat(undefined, { style: 'currency', currency: CURRENCY });
export function formatPrice(cents) {
  return moneyFormat.format(Number(cents) / 100);
}

const dateTimeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
export function formatDateTime(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : dateTimeFormat.format(d);
}

const timeFormat = new Intl.DateTimeFormat(undefined, { timeStyle: 'medium' });
export function formatTime(date) {
  return timeFormat.format(date);
}

/** "2d 03:04:05", "03:04:05" or "04:05" for a positive number of milliseconds. */
export function formatCountdown(ms) {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const days = Math.floor(total / 86400);
  const h = Math.floor((total % 86400) / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const pad = (n) => String(n).padStart(2, '0');
  const clock = h > 0 || days > 0 ? `${pad(h)}:${pad(m)}:${pad(s)}` : `${pad(m)}:${pad(s)}`;
  return days > 0 ? `${days}d ${clock}` : clock;
}

/** "12 s", "1 min 5 s": a wait in words. */
export function formatWait(ms) {
  const total = Math.max(1, Math.ceil(ms / 1000));
  if (total < 60) return `${total} s`;
  const m = Math.floor(total / 60);
  const s = total % 60;
  return s ? `${m} min ${s} s` : `${m} min`;
}

/** A value of <input type="datetime-local"> (browser's time zone) as RFC 3339 UTC. */
export function localInputToIso(value) {
  if (!value) return null;
  const d = new Date(value); // no zone in the string: parsed as local time
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

/** A Date as the value of <input type="datetime-local"> in the browser's time zone. */
export function dateToLocalInput(date) {
  const pad = (n) => String(n).padStart(2, '0');
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}`
  );
}

/** An Idempotency-Key: 32 hex characters (randomUUID needs a secure context). */
export function newIdempotencyKey() {
  if (globalThis.crypto && typeof crypto.randomUUID === 'function') {
    return crypto.randomUUID();
  }
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** document.createElement with properties, attributes and children in one call. */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
    else if (key in node && typeof value !== 'string') node[key] = value;
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/**
 * Shows a message in an aria-live region. `tone` is 'ok', 'error', 'warn' or 'info'.
 * The text is replaced (not appended) so screen readers announce the new outcome.
 */
export function announce(region, text, tone = 'info') {
  region.classList.remove('tone-ok', 'tone-error', 'tone-warn', 'tone-info');
  region.textContent = '';
  if (!text) {
    region.hidden = true;
    return;
  }
  region.hidden = false;
  region.classList.add(`tone-${tone}`);
  if (text instanceof Node) region.append(text);
  else region.textContent = text;
}

/** Calls `fn` now and then every `ms` while the page is visible; returns a stop function. */
export function poll(fn, ms) {
  let timer = null;
  let stopped = false;
  let running = false;
  const tick = async () => {
    if (stopped || running) return;
    running = true;
    try {
      await fn();
    } finally {
      running = false;
    }
  };
  const start = () => {
    if (timer === null && !stopped) timer = setInterval(tick, ms);
  };
  const pause = () => {
    if (timer !== null) clearInterval(timer);
    timer = null;
  };
  const onVisibility = () => {
    if (document.hidden) pause();
    else {
      tick();
      start();
    }
  };
  document.addEventListener('visibilitychange', onVisibility);
  tick();
  if (!document.hidden) start();
  return () => {
    stopped = true;
    pause();
    document.removeEventListener('visibilitychange', onVisibility);
  };
}
