// The sign-in panel and the account bar: checks a token, keeps it, and opens or closes
// the dashboard.
import { api, retryAfterMs } from '../api.js';
import { announce, byId } from '../dom.js';
import { formatWait, sentence } from '../format.js';
import { ErrorCode } from '../words.js';
import { currentToken, forgetToken, keepToken } from './session.js';

const ui = {
  nav: byId('admin-nav'),
  account: byId('account'),
  signedInAs: byId('signed-in-as'),
  signOutButton: byId('sign-out'),
  panel: byId('sign-in-panel'),
  form: byId('sign-in-form'),
  button: byId('sign-in-button'),
  tokenInput: byId('admin-token'),
  error: byId('sign-in-error'),
  dashboard: byId('dashboard'),
};

/** The dashboard's panels: started on sign-in, stopped on sign-out. */
let panels = { start() {}, stop() {} };

function showSignedIn(name) {
  ui.panel.hidden = true;
  ui.dashboard.hidden = false;
  ui.nav.hidden = false;
  ui.account.hidden = false;
  ui.signedInAs.textContent = `Signed in as ${name}`;
  panels.start();
}

/** Forgets the token, closes the dashboard and shows `message` by the sign-in form. */
export function signOut(message) {
  forgetToken();
  panels.stop();
  ui.dashboard.hidden = true;
  ui.nav.hidden = true;
  ui.account.hidden = true;
  ui.panel.hidden = false;
  ui.tokenInput.value = '';
  announce(ui.error, message || '', 'info');
  ui.tokenInput.focus();
}

async function checkToken(candidate) {
  const result = await api('/admin/api/me', { token: candidate });
  if (result.ok) return { name: result.data.name };
  if (result.error.code === ErrorCode.RATE_LIMITED) {
    const wait = retryAfterMs(result);
    const when = wait === null ? '' : ` You can try again in ${formatWait(wait)}.`;
    return { error: `${sentence(result.error.message)}${when}` };
  }
  if (result.error.code === ErrorCode.UNAUTHENTICATED) {
    return { error: 'That token was not accepted. Check it and try again.' };
  }
  return { error: result.error.message };
}

async function submit(event) {
  event.preventDefault();
  announce(ui.error, '');
  ui.tokenInput.removeAttribute('aria-invalid');
  const candidate = ui.tokenInput.value.trim();
  if (!candidate) {
    ui.tokenInput.setAttribute('aria-invalid', 'true');
    announce(ui.error, 'Enter the admin token.', 'error');
    ui.tokenInput.focus();
    return;
  }
  ui.button.disabled = true;
  const outcome = await checkToken(candidate);
  ui.button.disabled = false;
  if (outcome.error) {
    ui.tokenInput.setAttribute('aria-invalid', 'true');
    announce(ui.error, outcome.error, 'error');
    return;
  }
  keepToken(candidate);
  ui.tokenInput.value = '';
  showSignedIn(outcome.name);
}

/**
 * Binds the sign-in form and the sign-out button, then opens the dashboard if this tab
 * still holds a token the server accepts. `dashboard` is `{ start(), stop() }`.
 */
export async function startSignIn(dashboard) {
  panels = dashboard;
  ui.form.addEventListener('submit', submit);
  ui.signOutButton.addEventListener('click', () => signOut('You are signed out.'));
  const token = currentToken();
  if (!token) {
    ui.tokenInput.focus();
    return;
  }
  const outcome = await checkToken(token);
  if (outcome.error) signOut(outcome.error);
  else showSignedIn(outcome.name);
}
