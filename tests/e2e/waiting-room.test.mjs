// End-to-end: the waiting room (issue 24) on the shopper page and the dashboard, in
// headless Chromium against a running app. scripts/e2e.sh runs it with seckill.test.mjs,
// one file at a time (that file's chart scenario wants its purchases to be the only
// ones); each file makes items, shoppers and addresses of its own, so their order does
// not matter.
//
// The shopper page checks a place every `refreshIntervalSeconds` (6 s), never sooner.
// Rather than wait, the tests install Playwright's clock in the shopper's browser and
// move it on by that interval (`nextCheck`): the page's own timer fires, as when a laptop
// lid is opened again, and the page's wall clock is then set back to the real time. The
// other shoppers in the queue are API clients: they join, poll and buy with their pass.
//
//   E2E_BASE_URL=http://127.0.0.1:PORT E2E_ADMIN_TOKEN=… node --test waiting-room.test.mjs
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  ADMIN_NAME,
  ADMIN_TOKEN,
  RUN,
  apiCall,
  artifactPath,
  buyNow,
  createItem,
  eventually,
  launchBrowser,
  newClient,
  shopperToken,
  userId,
  waitForText,
  withFailureShots,
} from './helpers.mjs';

const ORDER_ID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/;
/** What the page waits between two checks of a place (the server's refreshIntervalSeconds). */
const REFRESH_MS = 6_000;
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 360, height: 780 };

let browser;
const items = {};
const clients = [];

before(async () => {
  browser = await launchBrowser();
  items.room = await createItem(`E2E Queue Console ${RUN}`, { stock: 5, priceCents: 39900 });
  items.scarce = await createItem(`E2E Queue Sneakers ${RUN}`, { stock: 1, priceCents: 17900 });
  items.closing = await createItem(`E2E Queue Lamp ${RUN}`, { stock: 5, priceCents: 5900 });
  items.ending = await createItem(`E2E Queue Kettle ${RUN}`, { stock: 1, priceCents: 4900 });
  const now = Date.now();
  const upcoming = await apiCall('/admin/api/items', {
    method: 'POST',
    token: ADMIN_TOKEN,
    body: {
      name: `E2E Queue Drone ${RUN}`,
      priceCents: 89900,
      stock: 5,
      startsAt: new Date(now + 3_600_000).toISOString(),
      endsAt: new Date(now + 7_200_000).toISOString(),
    },
  });
  assert.equal(upcoming.status, 201, JSON.stringify(upcoming.data));
  items.upcoming = upcoming.data;
});

after(async () => {
  for (const c of clients) await c.context.close().catch(() => {});
  if (browser) await browser.close();
});

async function client(ipN, options) {
  const c = await newClient(browser, ipN, options);
  clients.push(c);
  return c;
}

function card(page, name) {
  return page
    .locator('li.item-card')
    .filter({ has: page.getByRole('heading', { name, exact: true }) });
}

async function signInShopper(page, user) {
  await page.goto('/');
  await page.getByLabel('User id').fill(String(user));
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByText(`Signed in as user ${user}`, { exact: true }).waitFor();
}

async function signInAdmin(page) {
  await page.goto('/admin/');
  await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByText(`Signed in as ${ADMIN_NAME}`, { exact: true }).waitFor();
}

/**
 * The page's next check of its place (of item `itemId`'s, when it has several), now: its
 * clock moves on by the interval.
 */
async function nextCheck(page, itemId) {
  const path = itemId === undefined ? /^\/api\/items\/\d+\/queue$/ : new RegExp(`^/api/items/${itemId}/queue$`);
  const checked = page.waitForResponse((r) => r.request().method() === 'GET' && path.test(new URL(r.url()).pathname));
  await page.clock.fastForward(REFRESH_MS);
  await page.clock.setSystemTime(Date.now());
  return (await checked).json();
}

/**
 * Moves the page on, one check at a time, until `check` (which throws until then) holds
 * for the answer; the server's copy of a room lags it by up to a second or so.
 */
async function checkUntil(page, check, timeout = 10_000, itemId = undefined) {
  const deadline = Date.now() + timeout;
  for (;;) {
    const answer = await nextCheck(page, itemId);
    try {
      return await check(answer);
    } catch (error) {
      if (Date.now() >= deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

/**
 * `<name>-desktop.png` and `<name>-phone.png`: the screen with `focus` at its top (the
 * shared server lists every item of the run, so a whole page is mostly other items), or
 * with `element`, the focus alone; `settle` ms after each resize.
 */
async function screenshots(page, name, focus, { element = false, settle = 0 } = {}) {
  for (const [label, viewport] of [['desktop', DESKTOP], ['phone', PHONE]]) {
    const resized = page.viewportSize()?.width !== viewport.width;
    await page.setViewportSize(viewport);
    // A chart is drawn for the width it has: it takes its next sample to fit a new one.
    if (settle && resized) await new Promise((resolve) => setTimeout(resolve, settle));
    const path = artifactPath(`${name}-${label}.png`);
    // Transitions finished: a button just enabled shows as enabled.
    if (element) {
      await focus.screenshot({ path, animations: 'disabled' });
    } else {
      await focus.evaluate((node) => node.scrollIntoView({ block: 'start' }));
      await page.screenshot({ path, animations: 'disabled' });
    }
    if (label === 'phone') {
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(width <= PHONE.width, `${page.url()} is ${width}px wide on a ${PHONE.width}px screen`);
    }
  }
  await page.setViewportSize(DESKTOP);
}

/** A shopper driven through the API: their own user id and address. */
async function apiShopper(n, itemId) {
  const ip = `10.81.${Number.parseInt(RUN, 36) % 250}.${n}`;
  const token = await shopperToken(userId(n));
  const s = { token, ip, ticket: null, pass: null };
  s.join = async () => {
    const res = await apiCall(`/api/items/${itemId}/queue`, { method: 'POST', token, ip });
    assert.equal(res.status, 200, `join: ${JSON.stringify(res.data)}`);
    s.ticket = res.data.ticket;
    return res.data;
  };
  s.poll = () => apiCall(`/api/items/${itemId}/queue`, { token, ip, headers: { 'Queue-Ticket': s.ticket } });
  /** Polls (as a page would, only faster) until admitted; keeps the pass. */
  s.admitted = () =>
    eventually(
      async () => {
        const res = await s.poll();
        assert.equal(res.status, 200, JSON.stringify(res.data));
        assert.equal(res.data.state, 'admitted', JSON.stringify(res.data));
        s.pass = res.data.pass;
        return res.data;
      },
      { timeout: 10_000, interval: 200 },
    );
  s.buy = async () => {
    const res = await apiCall('/seckill', {
      method: 'POST',
      token,
      ip,
      headers: { 'Queue-Pass': s.pass },
      body: { itemId },
    });
    assert.equal(res.status, 200, `purchase: ${JSON.stringify(res.data)}`);
    return res.data;
  };
  return s;
}

/** Turns an item's waiting room on through the API (the first scenario uses the form). */
async function setRoom(itemId, settings) {
  const res = await apiCall(`/admin/api/items/${itemId}/waiting-room`, { method: 'PUT', token: ADMIN_TOKEN, body: settings });
  assert.equal(res.status, 200, JSON.stringify(res.data));
  return res.data;
}

/** Requests the page makes to the queue, by method. */
function watchQueueCalls(page) {
  const calls = { POST: [], GET: [], passes: [] };
  page.on('request', (r) => {
    const path = new URL(r.url()).pathname;
    if (/^\/api\/items\/\d+\/queue$/.test(path)) calls[r.method()]?.push(r);
    if (path === '/seckill') calls.passes.push(r.headers()['queue-pass'] ?? null);
  });
  return calls;
}

test('Q1. an admin turns a waiting room on; a shopper joins behind others, waits, is admitted and buys with the pass', async () => {
  const admin = await client(60);
  const shopper = await client(61);
  const adminPage = admin.page;
  const page = shopper.page;
  await withFailureShots('queue1', () => ({ admin: adminPage, shopper: page }), async () => {
    const item = items.room;
    // --- the admin sets the room up in the dashboard
    await signInAdmin(adminPage);
    const panel = adminPage.getByRole('region', { name: 'Waiting room' });
    await adminPage.getByRole('button', { name: `Waiting room of item ${item.id} (${item.name})` }).click();
    assert.equal(await panel.getByLabel('Item', { exact: true }).inputValue(), String(item.id));
    const form = adminPage.locator('#room-form');
    await waitForText(form.locator('legend'), /version \d+$/);
    assert.equal(await form.getByLabel('Queue shoppers for this item').isChecked(), false, 'off by default');

    // A pre-queue after the sale's start is refused by the server, next to its field.
    await form.getByLabel('Pre-queue opens').fill('2099-01-01T10:00');
    await form.getByRole('button', { name: 'Save waiting room' }).click();
    await waitForText(adminPage.locator('#room-prequeue-error'), /prequeueStartsAt must be before the sale's start/i);
    assert.equal(await form.getByLabel('Pre-queue opens').getAttribute('aria-invalid'), 'true');
    await form.getByLabel('Pre-queue opens').fill('');

    await form.getByLabel('Queue shoppers for this item').check();
    await form.getByLabel('Order', { exact: true }).selectOption('fifo');
    await form.getByLabel('Admitted per second').fill('100');
    await form.getByLabel('Live passes at most').fill('1');
    await form.getByLabel('Pass valid for (s)').fill('120');
    await form.getByLabel('Place lost after no check for (s)').fill('60');
    const put = adminPage.waitForRequest(
      (r) => r.method() === 'PUT' && new URL(r.url()).pathname === `/admin/api/items/${item.id}/waiting-room`,
    );
    await form.getByRole('button', { name: 'Save waiting room' }).click();
    assert.deepEqual((await put).postDataJSON(), {
      enabled: true,
      order: 'fifo',
      prequeueStartsAt: null,
      admitPerSecond: 100,
      maxActive: 1,
      passTtlSecs: 120,
      abandonAfterSecs: 60,
      message: '',
    });
    await waitForText(adminPage.locator('#room-result'), new RegExp(`^Saved the waiting room of item ${item.id} \\(version \\d+\\): on,`));
    assert.equal(await adminPage.locator('#room-prequeue-error').isHidden(), true);
    const stored = await apiCall(`/admin/api/items/${item.id}/waiting-room`, { token: ADMIN_TOKEN });
    assert.equal(stored.data.enabled, true);
    assert.equal(stored.data.maxActive, 1);

    // --- three shoppers join first; the first is admitted at once (one live pass at most)
    const others = [];
    for (const n of [1, 2, 3]) others.push(await apiShopper(10 + n, item.id));
    for (const s of others) await s.join();
    await others[0].admitted();

    // --- the shopper's page: the item's button joins the queue
    await page.clock.install();
    const calls = watchQueueCalls(page);
    await signInShopper(page, userId(20));
    const c = card(page, item.name);
    await c.getByRole('button', { name: 'Join the queue' }).click();
    const queue = c.getByRole('region', { name: `Queue for ${item.name}` });
    await waitForText(queue.getByRole('status'), /^You are in the queue\./);
    assert.equal(calls.POST.length, 1);
    await waitForText(queue.locator('.queue-ahead'), /^2$/);
    // Fourth in order of joining (fifo): behind the admitted one and two more.
    assert.equal((await queue.locator('.queue-place').textContent()).trim(), '4');
    await c.getByRole('button', { name: 'Waiting for your turn…' }).waitFor();
    assert.ok(await c.getByRole('button', { name: 'Waiting for your turn…' }).isDisabled());
    await waitForText(queue.locator('.queue-checked'), /Next check in [1-6] s\.$/);
    // No check before the interval the server asked for.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    assert.equal(calls.GET.length, 0, 'the page checks no sooner than refreshIntervalSeconds');

    // A reload keeps the place: no new join, the kept ticket is checked at once (one
    // check, well within an interval), and the page says the place was kept.
    const ticket = await page.evaluate(() => Object.entries(sessionStorage).find(([k]) => k.startsWith('seckill.queue.'))?.[1]);
    assert.ok(ticket && JSON.parse(ticket).ticket, 'the ticket is kept in sessionStorage');
    await page.reload();
    await page.getByText(`Signed in as user ${userId(20)}`, { exact: true }).waitFor();
    await waitForText(queue.locator('.queue-kept'), /^You kept your place\.$/, REFRESH_MS / 2);
    await waitForText(queue.locator('.queue-ahead'), /^2$/);
    // (The test hears of the page's requests a moment after the page has its answers.)
    await eventually(async () => assert.equal(calls.GET.length, 1, 'the first check answered the kept place'));
    assert.equal(calls.POST.length, 1, 'a reload does not join again');
    assert.equal(calls.GET.at(-1).headers()['queue-ticket'], JSON.parse(ticket).ticket);
    await waitForText(queue.getByRole('status'), /^You are in the queue\./);
    // No admission can happen while the one pass is out: an estimate, or none.
    await waitForText(queue.locator('.queue-wait'), /^(About \d+ s( \(likely .+\))?|Any moment now|Not known yet)$/);
    await screenshots(page, 'shopper-queue-waiting', c);

    // --- the first buys: the second is admitted; the shopper's page sees one fewer ahead
    await others[0].buy();
    await others[1].admitted();
    await checkUntil(page, async (answer) => assert.equal(answer.ahead, 1));
    await waitForText(queue.locator('.queue-ahead'), /^1$/);
    assert.equal(await queue.locator('progress').getAttribute('aria-label'), 'Your progress through the queue');
    await waitForText(queue.locator('.queue-progress-text'), /^50 %$/);

    // The admin's panel shows the room live: one pass out, the shopper and one more waiting.
    await eventually(async () => {
      assert.equal((await adminPage.locator('#room-live-passes').textContent()).trim(), '1');
      assert.equal((await adminPage.locator('#room-waiting').textContent()).trim(), '2');
    });
    await adminPage.locator('svg[data-chart="room"] [data-series="waiting"]').waitFor({ state: 'attached' });
    const waitingLine = await adminPage
      .locator('svg[data-chart="room"] [data-series="waiting"]')
      .getAttribute('data-values');
    assert.ok(waitingLine.split(',').some((v) => v === '2'), 'the chart plots the waiting shoppers');
    await screenshots(adminPage, 'admin-waiting-room', panel, { element: true, settle: 2_500 });

    // --- the others buy; the shopper's turn comes
    await others[1].buy();
    await others[2].admitted();
    await others[2].buy();
    const admitted = await checkUntil(page, async (answer) => {
      assert.equal(answer.state, 'admitted');
      return answer;
    });
    assert.ok(typeof admitted.pass === 'string' && admitted.pass.length > 0);
    await waitForText(queue.getByRole('status'), new RegExp(`^It is your turn: buy ${item.name} now`));
    await waitForText(queue.getByRole('timer'), /^Buy within 0[12]:\d\d: your pass is kept for you until /);
    const buy = c.getByRole('button', { name: 'Buy now' });
    assert.equal(await buy.isEnabled(), true);
    // A turn nobody misses: the tab's title says it, and Buy has the focus.
    await eventually(async () => assert.match(await page.title(), new RegExp(`^Your turn: ${item.name} — `)));
    assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Buy now');
    await screenshots(page, 'shopper-queue-admitted', c);

    // --- the purchase carries the pass
    await buy.click();
    const [orderId] = await waitForText(c.locator('.item-outcome'), ORDER_ID);
    assert.equal((await c.locator('.item-outcome').textContent()).trim(), `Order placed for ${item.name}. Order id: ${orderId}`);
    assert.equal(calls.passes.length, 1);
    assert.ok(calls.passes[0], 'the purchase carried the pass');
    await queue.waitFor({ state: 'hidden' });
    assert.equal(
      await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith('seckill.queue.')).length),
      0,
      'the place is forgotten once bought',
    );
    await eventually(async () => assert.doesNotMatch(await page.title(), /^Your turn/, 'the turn is over'));
    await page.getByRole('region', { name: 'My orders' }).getByRole('listitem').filter({ hasText: orderId }).waitFor();
    assert.deepEqual(admin.problems, []);
    assert.deepEqual(shopper.problems, []);
  });
});

test('Q2. sold out while waiting: the page says so at once, with the unit an unpaid order holds; the unit comes back and the shopper buys', async () => {
  const shopper = await client(62, { viewport: PHONE, isMobile: true, hasTouch: true });
  const page = shopper.page;
  await withFailureShots('queue2', () => ({ shopper: page }), async () => {
    const item = items.scarce;
    await setRoom(item.id, { enabled: true, order: 'fifo', admitPerSecond: 100, maxActive: 1, passTtlSecs: 120, abandonAfterSecs: 60 });
    const first = await apiShopper(30, item.id);
    await first.join();
    await first.admitted();

    await page.clock.install();
    const calls = watchQueueCalls(page);
    await signInShopper(page, userId(31));
    const c = card(page, item.name);
    await c.getByRole('button', { name: 'Join the queue' }).click();
    const queue = c.getByRole('region', { name: `Queue for ${item.name}` });
    await waitForText(queue.getByRole('status'), /^You are in the queue\./);
    await waitForText(queue.locator('.queue-ahead'), /^0$/);

    // The one unit is bought by the shopper ahead, and not paid yet.
    const order = await first.buy();
    const soldOut = await checkUntil(page, async (answer) => {
      assert.equal(answer.state, 'sold_out');
      assert.equal(answer.mayReturn, 1);
      return answer;
    });
    assert.ok(soldOut.mayReturnUntil, 'when the unpaid unit may come back');
    await waitForText(queue.getByRole('status'), new RegExp(`^Sold out: every unit of ${item.name} is taken for now\\.$`));
    await waitForText(queue.locator('.queue-detail'), /^1 unit is held by orders not paid yet\. A unit may come back until .+; your place still counts\.$/);
    assert.ok(await queue.locator('.queue-ahead').isHidden(), 'sold out, nobody ahead is counted');
    const button = c.getByRole('button', { name: 'Sold out' });
    assert.equal(await button.isDisabled(), true);
    await screenshots(page, 'shopper-queue-sold-out', c);

    // The order is cancelled: its unit comes back, and it is the shopper's turn.
    const cancelled = await apiCall(`/api/orders/${order.orderId}/cancel`, { method: 'POST', token: first.token, ip: first.ip });
    assert.equal(cancelled.status, 200, JSON.stringify(cancelled.data));
    await checkUntil(page, async (answer) => assert.equal(answer.state, 'admitted'));
    await c.getByRole('button', { name: 'Buy now' }).click();
    await waitForText(c.locator('.item-outcome'), new RegExp(`^Order placed for ${item.name}\\. Order id: ${ORDER_ID.source}$`));
    assert.equal(calls.passes.length, 1);
    assert.ok(calls.passes[0], 'the purchase carried the pass');
    assert.deepEqual(shopper.problems, []);
  });
});

test('Q3. a queue not open yet says when it opens; a room turned off closes the queue and the button buys directly', async () => {
  const shopper = await client(63);
  const page = shopper.page;
  await withFailureShots('queue3', () => ({ shopper: page }), async () => {
    // A pre-queue half an hour before a sale an hour away.
    const opensAt = Date.now() + 1_800_000;
    await setRoom(items.upcoming.id, { enabled: true, prequeueStartsAt: new Date(opensAt).toISOString() });
    await setRoom(items.closing.id, { enabled: true, order: 'random', admitPerSecond: 100, maxActive: 10, passTtlSecs: 120, abandonAfterSecs: 60 });

    await page.clock.install();
    await signInShopper(page, userId(40));
    const soon = card(page, items.upcoming.name);
    await waitForText(soon.locator('.badge'), /^Starts in /);
    await soon.getByRole('button', { name: 'Join the queue' }).click();
    const soonQueue = soon.getByRole('region', { name: `Queue for ${items.upcoming.name}` });
    await waitForText(soonQueue.getByRole('status'), new RegExp(`^The queue for ${items.upcoming.name} opens at .+\\. Join then\\.$`));
    const wait = soon.getByRole('button', { name: /^Queue opens in (29|30):\d\d$/ });
    await wait.waitFor();
    assert.ok(await wait.isDisabled());

    // In random order, a joiner's place is drawn within a second; then it is admitted.
    const c = card(page, items.closing.name);
    await c.getByRole('button', { name: 'Join the queue' }).click();
    const queue = c.getByRole('region', { name: `Queue for ${items.closing.name}` });
    await waitForText(queue.getByRole('status'), /^You are in the queue\./);
    await checkUntil(page, async (answer) => assert.equal(answer.state, 'admitted'));
    await c.getByRole('button', { name: 'Buy now' }).waitFor();

    // The room is turned off: the next check says the queue is closed; the item sells
    // without a queue again, and the button buys directly.
    await setRoom(items.closing.id, { enabled: false });
    await checkUntil(page, async (answer) => assert.equal(answer.state, 'closed'));
    await waitForText(queue.getByRole('status'), new RegExp(`^The queue for ${items.closing.name} is closed: `));
    assert.equal(
      await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith('seckill.queue.')).length),
      0,
      'a closed place is forgotten',
    );
    await eventually(async () => assert.equal(await c.getAttribute('data-waiting-room'), 'off'));
    await buyNow(page, c);
    await waitForText(c.locator('.item-outcome'), new RegExp(`^Order placed for ${items.closing.name}\\. Order id: `));
    assert.deepEqual(shopper.problems, []);
  });
});

/** The sizes the queue's layout is checked at: a desktop and a phone. */
const LAYOUTS = [
  ['1280', { width: 1280, height: 900 }],
  ['390', { width: 390, height: 844 }],
];

/**
 * `<name>-1280.png` and `<name>-390.png`: the item's card at the top of the screen. On
 * the desktop its queue panel is at least 400 px wide; at both sizes the page is no wider
 * than the screen and `oneLine` (if given) takes one line.
 */
async function layoutShots(page, name, itemCard, oneLine) {
  for (const [label, viewport] of LAYOUTS) {
    await page.setViewportSize(viewport);
    await itemCard.evaluate((node) => node.scrollIntoView({ block: 'start' }));
    await page.screenshot({ path: artifactPath(`${name}-${label}.png`), animations: 'disabled' });
    const panel = await itemCard.locator('section.queue').boundingBox();
    if (label === '1280') assert.ok(panel.width >= 400, `the queue panel is ${panel.width}px wide at 1280px`);
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= viewport.width, `the page is ${width}px wide on a ${viewport.width}px screen`);
    if (oneLine) {
      // One line box: the text's client rects, one per line it wraps over.
      const lines = await oneLine.evaluate((node) => {
        const range = document.createRange();
        range.selectNodeContents(node);
        return range.getClientRects().length;
      });
      assert.equal(lines, 1, `"${await oneLine.textContent()}" takes ${lines} lines at ${label}px`);
    }
  }
  await page.setViewportSize(DESKTOP);
}

/** Every time of day the shopper page shows is written one way: "9:05 PM", to the minute. */
async function assertOneTimeFormat(page) {
  const text = await page.locator('body').innerText();
  const times = text.match(/\b\d{1,2}:\d\d(?::\d\d)?\s?[AP]M\b/g) ?? [];
  assert.ok(times.length > 0, 'the page shows times of day');
  for (const time of times) assert.match(time, /^(1[0-2]|[1-9]):[0-5]\d\s[AP]M$/, `"${time}" on a page that also says ${times.join(', ')}`);
}

test('Q4. a turn nobody misses: the pre-queue said to a signed-out visitor, the kept place said at once after a reload and in a new tab, a header that follows the draw, the countdown spoken, one time format, a panel that fits its card', async () => {
  const shopper = await client(64);
  const page = shopper.page;
  await withFailureShots('queue4', () => ({ shopper: page }), async () => {
    // A sale an hour away whose pre-queue opened a minute ago, and one on sale now whose
    // one pass is held by a shopper ahead.
    const now = Date.now();
    const created = await apiCall('/admin/api/items', {
      method: 'POST',
      token: ADMIN_TOKEN,
      body: {
        name: `E2E Queue Camera ${RUN}`,
        priceCents: 129900,
        stock: 3,
        startsAt: new Date(now + 3_600_000).toISOString(),
        endsAt: new Date(now + 7_200_000).toISOString(),
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.data));
    const pre = created.data;
    await setRoom(pre.id, { enabled: true, order: 'random', prequeueStartsAt: new Date(now - 60_000).toISOString() });
    const turn = await createItem(`E2E Queue Watch ${RUN}`, { stock: 3, priceCents: 24900 });
    await setRoom(turn.id, { enabled: true, order: 'random', admitPerSecond: 100, maxActive: 1, passTtlSecs: 120, abandonAfterSecs: 60 });
    const ahead = await apiShopper(50, turn.id);
    await ahead.join();
    await ahead.admitted();

    // --- signed out: the pre-queue is open, and signing in joins it
    await page.clock.install();
    const calls = watchQueueCalls(page);
    await page.goto('/');
    const preCard = card(page, pre.name);
    await waitForText(preCard.locator('.room-note'), /^The queue is open: sign in to join it\.$/);
    assert.ok(await preCard.getByRole('button', { name: 'Sign in to join the queue' }).isDisabled());
    await assertOneTimeFormat(page);

    // --- signed in: the welcome goes with the first press; the place is not drawn yet
    await signInShopper(page, userId(51));
    await waitForText(page.locator('#outcome'), new RegExp(`^Welcome, user ${userId(51)}\\. `));
    await preCard.getByRole('button', { name: 'Join the queue' }).click();
    const preQueue = preCard.getByRole('region', { name: `Queue for ${pre.name}` });
    await waitForText(preQueue.locator('.queue-place'), /^Not drawn yet$/);
    // The draw is at the sale's start, an hour away: the header says when, not "soon".
    await waitForText(preQueue.getByRole('status'), /Your place is drawn at (1[0-2]|[1-9]):[0-5]\d\s[AP]M\.$/);
    assert.ok(await page.locator('#outcome').isHidden(), 'the welcome is down once a queue is joined');
    assert.ok(await preQueue.locator('.queue-kept').isHidden(), 'a first join kept nothing');
    await layoutShots(page, 'queue-waiting', preCard, preQueue.locator('.queue-place'));

    // --- a reload: the kept place at once, from one check
    const checks = calls.GET.length;
    await page.reload();
    await waitForText(preQueue.locator('.queue-kept'), /^You kept your place\.$/, REFRESH_MS / 2);
    await eventually(async () => assert.equal(calls.GET.length, checks + 1, 'one check, made at once'));
    assert.equal((await preQueue.locator('.queue-place').textContent()).trim(), 'Not drawn yet');

    // --- a reload while the ticket's poll budget is dry (another client polls it without
    // pause): the page waits what the 429 says, then shows the kept place
    const { ticket } = JSON.parse(await page.evaluate(() => Object.entries(sessionStorage).find(([k]) => k.startsWith('seckill.queue.'))[1]));
    const token = await shopperToken(userId(51));
    let draining = true;
    const drain = (async () => {
      const until = Date.now() + 10_000;
      while (draining && Date.now() < until) await apiCall(`/api/items/${pre.id}/queue`, { token, headers: { 'Queue-Ticket': ticket } });
    })();
    const refusedCheck = page.waitForResponse((r) => r.status() === 429 && new URL(r.url()).pathname === `/api/items/${pre.id}/queue`);
    await page.reload();
    const refused = await (await refusedCheck).json();
    draining = false;
    await drain;
    assert.equal(refused.code, 'POLLING_TOO_FAST');
    const waitS = Math.ceil(Math.max(refused.retryAfterMs, 1_000) / 1_000);
    await waitForText(preQueue.locator('.queue-checked'), new RegExp(`^Could not check your place \\(.+\\)\\. Trying again in ${waitS} s\\.$`));
    await waitForText(preQueue.locator('.queue-kept'), /^You kept your place\.$/, REFRESH_MS / 2);

    // --- a new tab (no sessionStorage): joining answers the kept place, and says so
    const tab = await shopper.context.newPage();
    await tab.goto('/');
    const tabCard = card(tab, pre.name);
    const rejoin = tab.waitForResponse((r) => r.request().method() === 'POST' && /\/queue$/.test(r.url()));
    await tabCard.getByRole('button', { name: 'Join the queue' }).click();
    assert.equal((await (await rejoin).json()).rejoined, true);
    await waitForText(tabCard.locator('.queue-kept'), /^You kept your place\.$/);
    await tab.close();

    // --- drawn within a second (random order): the header follows the draw
    const turnCard = card(page, turn.name);
    const turnQueue = turnCard.getByRole('region', { name: `Queue for ${turn.name}` });
    const joining = page.waitForResponse((r) => r.request().method() === 'POST' && /\/queue$/.test(r.url()));
    await turnCard.getByRole('button', { name: 'Join the queue' }).click();
    const joined = await (await joining).json();
    await waitForText(turnQueue.getByRole('status'), /^You are in the queue\./);
    if (joined.position === null) await waitForText(turnQueue.getByRole('status'), /Your place is drawn soon\.$/);
    await checkUntil(page, async (answer) => assert.ok(Number.isInteger(answer.position), JSON.stringify(answer)), 10_000, turn.id);
    await waitForText(turnQueue.locator('.queue-place'), /^\d+$/);
    await waitForText(turnQueue.getByRole('status'), /^You are in the queue\. Keep this page open: it checks your place for you\.$/);

    // --- the turn: the countdown is spoken politely, not every second
    await ahead.buy();
    await checkUntil(page, async (answer) => assert.equal(answer.state, 'admitted'), 10_000, turn.id);
    const spoken = turnQueue.locator('.queue-spoken');
    assert.equal(await spoken.getAttribute('aria-live'), 'polite');
    await waitForText(spoken, new RegExp(`^Your turn: (1 min \\d+ s|2 min) left to buy ${turn.name}\\.$`));
    await layoutShots(page, 'queue-admitted', turnCard);
    await assertOneTimeFormat(page);
    // A minute on, it says the minute; the seconds after it say nothing new.
    await page.clock.fastForward(61_000);
    const [said] = await waitForText(spoken, new RegExp(`^(1 min|\\d+ s) left to buy ${turn.name}\\.$`));
    await page.clock.runFor(3_000);
    assert.equal((await spoken.textContent()).trim(), said);
    assert.deepEqual(shopper.problems, []);
  });
});

test('Q5. a room closes once sold out for good: the page stops checking and says so, the operator\'s message shown as text; the admin sees it closed', async () => {
  const admin = await client(66);
  const shopper = await client(67);
  const page = shopper.page;
  const adminPage = admin.page;
  await withFailureShots('queue4', () => ({ admin: adminPage, shopper: page }), async () => {
    const item = items.ending;
    const message = '<b>hi</b> — thanks for waiting';
    await setRoom(item.id, { enabled: true, order: 'fifo', admitPerSecond: 100, maxActive: 1, passTtlSecs: 120, abandonAfterSecs: 60, message });
    const first = await apiShopper(70, item.id);
    await first.join();
    await first.admitted();

    await page.clock.install();
    const calls = watchQueueCalls(page);
    await signInShopper(page, userId(71));
    const c = card(page, item.name);
    await c.getByRole('button', { name: 'Join the queue' }).click();
    const queue = c.getByRole('region', { name: `Queue for ${item.name}` });
    await waitForText(queue.getByRole('status'), /^You are in the queue\./);
    // The operator's message, as the text it is: no element made of it.
    await waitForText(queue.locator('.queue-message'), /^<b>hi<\/b> — thanks for waiting$/);
    assert.equal(await queue.locator('.queue-message b').count(), 0);

    // The one unit is bought and paid: nothing can come back, the room closes.
    const order = await first.buy();
    const paid = await apiCall(`/api/orders/${order.orderId}/pay`, { method: 'POST', token: first.token, ip: first.ip });
    assert.equal(paid.status, 200, JSON.stringify(paid.data));
    const closed = await checkUntil(page, async (answer) => {
      assert.equal(answer.state, 'closed');
      return answer;
    });
    assert.equal(closed.closedReason, 'sold_out');
    assert.equal(closed.message, message);
    await waitForText(queue.getByRole('status'), new RegExp(`^Sold out at .+ — the queue for ${item.name} has ended\\.$`));
    assert.equal((await queue.locator('.queue-message').textContent()).trim(), message);
    assert.equal(
      await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith('seckill.queue.')).length),
      0,
      'a closed place is forgotten',
    );

    // No check after the close, however long the page stays open.
    const checks = calls.GET.length;
    const another = page
      .waitForRequest((r) => r.method() === 'GET' && /^\/api\/items\/\d+\/queue$/.test(new URL(r.url()).pathname), { timeout: 1_500 })
      .then(() => true, () => false);
    await page.clock.fastForward(REFRESH_MS * 3);
    await page.clock.setSystemTime(Date.now());
    assert.equal(await another, false, 'the page stopped checking');
    assert.equal(calls.GET.length, checks);

    for (const [width, height] of [[1280, 900], [390, 844]]) {
      await page.setViewportSize({ width, height });
      await c.evaluate((node) => node.scrollIntoView({ block: 'start' }));
      await page.screenshot({ path: artifactPath(`queue-closed-${width}.png`), animations: 'disabled' });
      const wide = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(wide <= width, `the page is ${wide}px wide on a ${width}px screen`);
    }

    // The admin's panel: closed, when, and the final figures; the message in its field.
    await signInAdmin(adminPage);
    const panel = adminPage.getByRole('region', { name: 'Waiting room' });
    await adminPage.getByRole('button', { name: `Waiting room of item ${item.id} (${item.name})` }).click();
    await waitForText(
      adminPage.locator('#room-closed'),
      /^Closed: sold out at .+, no unit can come back\. Final figures: 2 joined, 1 admitted, 0 abandoned, 1 bought\. Raising the item’s stock reopens the queue\.$/,
    );
    assert.doesNotMatch(await adminPage.locator('#room-totals').textContent(), /wait for a unit to come back/);
    assert.equal(await panel.getByLabel('Message to everyone waiting').inputValue(), message);
    await panel.screenshot({ path: artifactPath('admin-room-closed.png'), animations: 'disabled' });
    assert.deepEqual(admin.problems, []);
    assert.deepEqual(shopper.problems, []);
  });
});
