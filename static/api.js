// Calls to the API on this origin, shared by both pages: one envelope for every answer,
// the wait a refusal asks for, and the key that makes a purchase safe to retry.
import { ErrorCode } from './words.js';

const REQUEST_TIMEOUT_MS = 15000;

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
        code: ErrorCode.NETWORK,
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

/** An Idempotency-Key: 32 hex characters (randomUUID needs a secure context). */
export function newIdempotencyKey() {
  if (globalThis.crypto && typeof crypto.randomUUID === 'function') {
    return crypto.randomUUID();
  }
  const bytes = new Uint8Array(16);
  crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
