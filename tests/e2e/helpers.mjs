// Helpers of the end-to-end tests: settings from the environment, the browser, the admin
// sign-in, polling with deadlines, and direct API calls (and SQL) for set-up.
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set (scripts/e2e.sh sets it)`);
  return value;
}

export const BASE_URL = required('E2E_BASE_URL').replace(/\/+$/, '');
export const ADMIN_TOKEN = required('E2E_ADMIN_TOKEN');
export const ADMIN_NAME = process.env.E2E_ADMIN_NAME || 'e2e';
export const CHROMIUM = process.env.E2E_CHROMIUM || '/usr/bin/chromium';
export const ARTIFACTS = path.resolve(process.env.E2E_ARTIFACTS || path.join(here, '../../test-artifacts/e2e'));

// Unique per run, so that a rerun against the same server within a minute meets neither
// the previous run's purchases nor its rate-limit windows.
const runSeconds = Math.floor(Date.now() / 1000);
export const RUN = runSeconds.toString(36);
const USER_BASE = (runSeconds % 1_000_000) * 100;
const IP_OCTET = runSeconds % 250;

/** A user id of this run: scenario n uses userId(n). */
export const userId = (n) => USER_BASE + n;
/** A client address of this run (only ever sent as X-Forwarded-For, never connected to). */
export const clientIp = (n) => `10.77.${IP_OCTET}.${n}`;

export const DEFAULT_TIMEOUT_MS = 10_000;

export async function launchBrowser() {
  // Playwright gives every launch a fresh, temporary --user-data-dir of its own (under
  // TMPDIR) and adds --headless; it refuses a --user-data-dir in `args`.
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--no-first-run',
    ],
    timeout: 30_000,
  });
}

/**
 * A browser context that acts as its own shopper/admin: its own storage and its own
 * client address (the app trusts X-Forwarded-For from 127.0.0.1).
 */
export async function newClient(browser, ipN, options = {}) {
  const context = await browser.newContext({
    baseURL: BASE_URL,
    extraHTTPHeaders: { 'X-Forwarded-For': clientIp(ipN) },
    viewport: { width: 1280, height: 900 },
    locale: 'en-US',
    ...options,
  });
  context.setDefaultTimeout(DEFAULT_TIMEOUT_MS);
  const page = await context.newPage();
  const problems = watchPage(page);
  return { context, page, problems };
}

/**
 * Collects what must never happen on our pages: uncaught errors and CSP violations
 * (which Chromium reports on the console).
 */
export function watchPage(page) {
  const problems = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (msg) => {
    const text = msg.text();
    if (/Content Security Policy|Refused to (execute|load|apply|connect|frame)/i.test(text)) {
      problems.push(`CSP: ${text}`);
    }
  });
  return problems;
}

/**
 * Retries `check` (which throws while its condition does not hold) until it passes or
 * the deadline passes; returns what it returned. The last failure is rethrown.
 */
export async function eventually(check, { timeout = DEFAULT_TIMEOUT_MS, interval = 100 } = {}) {
  const deadline = Date.now() + timeout;
  for (;;) {
    try {
      return await check();
    } catch (error) {
      if (Date.now() >= deadline) throw error;
    }
    await new Promise((resolve) => setTimeout(resolve, interval));
  }
}

/** Waits until the locator's text matches `pattern`; returns the match. */
export async function waitForText(locator, pattern, timeout = DEFAULT_TIMEOUT_MS) {
  let last = '';
  try {
    return await eventually(
      async () => {
        last = (await locator.textContent({ timeout: 1000 })) ?? '';
        const match = last.match(pattern);
        if (!match) throw new Error('no match yet');
        return match;
      },
      { timeout },
    );
  } catch {
    throw new Error(`expected text matching ${pattern}, last seen: ${JSON.stringify(last.trim())}`);
  }
}

export function artifactPath(name) {
  mkdirSync(ARTIFACTS, { recursive: true });
  return path.join(ARTIFACTS, name);
}

/** Saves a screenshot when `fn` fails, then rethrows. */
export async function withFailureShots(name, pages, fn) {
  try {
    return await fn();
  } catch (error) {
    for (const [label, page] of Object.entries(pages())) {
      if (page && !page.isClosed()) {
        await page
          .screenshot({ path: artifactPath(`failure-${name}-${label}.png`), fullPage: true })
          .catch(() => {});
      }
    }
    throw error;
  }
}

/** Signs the page in to the admin dashboard with the run's token and waits for the greeting. */
export async function signInAdmin(page) {
  await page.goto('/admin/');
  await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByText(`Signed in as ${ADMIN_NAME}`, { exact: true }).waitFor();
}

// --- direct API calls (set-up and server-side probes) ---------------------------------

export async function apiCall(pathname, { method = 'GET', token, body, ip = clientIp(250), headers = {} } = {}) {
  const h = { Accept: 'application/json', 'X-Forwarded-For': ip, ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const res = await fetch(`${BASE_URL}${pathname}`, {
    method,
    headers: h,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  return { status: res.status, data, headers: res.headers };
}

/** Creates an item whose sale opened a minute ago and lasts an hour. */
export async function createItem(name, { stock = 50, priceCents = 1999 } = {}) {
  const now = Date.now();
  const res = await apiCall('/admin/api/items', {
    method: 'POST',
    token: ADMIN_TOKEN,
    body: {
      name,
      priceCents,
      stock,
      startsAt: new Date(now - 60_000).toISOString(),
      endsAt: new Date(now + 3_600_000).toISOString(),
    },
  });
  if (res.status !== 201) throw new Error(`creating ${name} answered ${res.status}: ${JSON.stringify(res.data)}`);
  return res.data;
}

export async function shopperToken(user) {
  const res = await apiCall('/api/session', { method: 'POST', body: { userId: user } });
  if (res.status !== 200) throw new Error(`session for ${user} answered ${res.status}: ${JSON.stringify(res.data)}`);
  return res.data.token;
}

/**
 * Runs one SQL statement on the run's database (psql, E2E_DATABASE_URL): the set-up of
 * what no API writes, such as the history's rows. Answers psql's unaligned output.
 */
export function sql(statement) {
  return execFileSync('psql', [required('E2E_DATABASE_URL'), '-v', 'ON_ERROR_STOP=1', '-qtAc', statement], {
    encoding: 'utf8',
  }).trim();
}

/**
 * Presses Buy now on the card of an item without a queue and confirms in the dialog that
 * names the item and its price (the purchase is sent only then).
 */
export async function buyNow(page, itemCard) {
  await itemCard.getByRole('button', { name: 'Buy now' }).click();
  const ask = page.getByRole('dialog', { name: /^Buy .+ for / });
  await ask.getByRole('button', { name: /^Buy for / }).click();
  await ask.waitFor({ state: 'detached' });
}
