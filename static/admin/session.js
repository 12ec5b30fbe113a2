// The admin token, kept in this tab's sessionStorage only, and the calls that carry it.
// A 401 ends the session: the entry module says what happens then.
import { api } from '../api.js';
import { announce } from '../dom.js';

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
