// The admin token, kept in this tab's sessionStorage only, and the calls that carry it.
// A 401 ends the session: the entry module says what happens then.
import { api } from '../api.js';
import { announce, el } from '../dom.js';
import { formatNumber } from '../format.js';

const TOKEN_KEY = 'seckill.admin.token';

let token = sessionStorage.getItem(TOKEN_KEY);
let lost = () => {};

/** The token this tab signed in with, or null. */
export const currentToken = () => token;

/** Whether a token is held: answers that arrive after a sign-out are dropped. */
export const signedIn = () => Boolean(token);

export function keepToken(accepted) {
  token = accepted;
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
}

/** What to do when the server stops accepting the token. */
export function whenSessionLost(fn) {
  lost = fn;
}

/** Admin API call with the token; a 401 ends the session. */
export async function adminApi(path, options = {}) {
  const result = await api(path, { ...options, token });
  if (result.status === 401 && token) lost();
  return result;
}

/**
 * GETs what a panel shows: its data, or null when there is nothing to show. A failure
 * is said in the panel's error line ("Could not load <what>: …"), a success clears it;
 * after a sign-out nothing is said.
 */
export async function loadPanel(path, errorLine, what) {
  if (!token) return null;
  const result = await adminApi(path);
  if (!token) return null;
  if (!result.ok) {
    announce(errorLine, `Could not load ${what}: ${result.error.message}`, 'error');
    return null;
  }
  announce(errorLine, '');
  return result.data;
}

/**
 * GETs a file with the token (which a plain link cannot send): resolves to
 * { ok: true, blob, name } with the name the server suggests (Content-Disposition), or
 * { ok: false, status, message }. A 401 ends the session.
 */
export async function adminDownload(path, fallbackName) {
  let res;
  try {
    res = await fetch(path, { headers: { Authorization: `Bearer ${token}` }, cache: 'no-store' });
  } catch {
    return { ok: false, status: 0, message: 'Could not reach the server. Check your connection and try again.' };
  }
  if (res.status === 401 && token) lost();
  if (!res.ok) {
    let message = `Unexpected answer from the server (HTTP ${res.status}).`;
    try {
      const body = await res.json();
      if (body && typeof body.message === 'string') message = body.message;
    } catch {
      // Not our JSON envelope: the status says enough.
    }
    return { ok: false, status: res.status, message };
  }
  const disposition = res.headers.get('Content-Disposition') || '';
  const named = /filename="?([^";]+)"?/i.exec(disposition);
  try {
    return { ok: true, blob: await res.blob(), name: named ? named[1] : fallbackName };
  } catch {
    return { ok: false, status: res.status, message: 'The download broke off before its end. Try again.' };
  }
}

/**
 * Hands a downloaded file (adminDownload's `{ blob, name }`) to the browser to save;
 * answers its size as a person reads it ("12 KB").
 */
export function saveFile(file) {
  const url = URL.createObjectURL(file.blob);
  const link = el('a', { href: url, download: file.name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  // The download has its own copy once it started.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
  const kb = file.blob.size / 1024;
  return kb < 1024 ? `${formatNumber(Math.ceil(kb))} KB` : `${formatNumber(Math.round(kb / 102.4) / 10)} MB`;
}
