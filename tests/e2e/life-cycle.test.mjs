// End-to-end: a sale's life from both sides (issue 25). A shopper buys and is told on the
// card to pay by when, pays there, cancels after a confirmation, meets the limiter with a
// live countdown, and is told plainly when an answer leaves the order open (retrying
// with the same Idempotency-Key). An operator edits, ends and archives an item from the
// dashboard while the shop follows, reads the item's history, finds orders by id and
// user, and exports them as CSV. Screenshots at 1280×900 and 390×844.
//
//   E2E_BASE_URL=http://127.0.0.1:PORT E2E_ADMIN_TOKEN=… node --test life-cycle.test.mjs
//
// The scenarios run in order; the seckill policy's user rule is set to the shop's default
// (3 per 60 s) for them, and put back afterwards.
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
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
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };
const UNCONFIRMED =
  'We could not confirm your purchase: an order may have been placed. Check My orders; trying again is safe, it will not buy twice.';
const CSV_HEADER = 'order_id,item_id,item_name,user_id,state,amount_cents,created_at,pay_by,paid_at';
/**
 * Screenshots of a part of the dashboard: its sticky bar would be drawn over the part,
 * so it stays at the top of the page meanwhile (through the CSSOM: the page's CSP
 * refuses the <style> Playwright's `style` option injects).
 */
async function withBarAtTop(page, fn) {
  const set = (value) => page.evaluate((v) => document.querySelectorAll('.topbar').forEach((bar) => { bar.style.position = v; }), value);
  await set('static');
  try {
    return await fn();
  } finally {
    await set('');
  }
}

let browser;
const items = {};
const clients = [];
/** The user rule's threshold before this file set it, put back at the end. */
let userThresholdBefore = null;
/** Probes of the limiter so far: each is a new shopper (60 + n) with an address of its own. */
let probes = 0;

/** An address of this file's API shoppers (never connected to, only X-Forwarded-For). */
const apiIp = (n) => `10.82.${Number.parseInt(RUN, 36) % 250}.${n}`;

async function setUserRule(threshold) {
  const res = await apiCall('/admin/api/policies/seckill', {
    method: 'PUT',
    token: ADMIN_TOKEN,
    body: { rules: [{ name: 'user', windowMs: 60_000, threshold }] },
  });
  assert.equal(res.status, 200, JSON.stringify(res.data));
  // The limiter picks a change up within a second: probe until its header shows it.
  const want = `"user";q=${threshold};w=60`;
  await eventually(
    async () => {
      probes += 1;
      const res = await apiCall('/seckill', {
        method: 'POST',
        token: await shopperToken(userId(60 + probes)),
        ip: apiIp(100 + probes),
        body: { itemId: items.probe.id },
      });
      const seen = res.headers.get('ratelimit-policy') || '';
      if (!seen.includes(want)) throw new Error(`ratelimit-policy is ${seen}`);
    },
    { timeout: 10_000, interval: 200 },
  );
}

before(async () => {
  browser = await launchBrowser();
  items.probe = await createItem(`E2E Life Probe ${RUN}`, { stock: 1000, priceCents: 1 });
  items.pay = await createItem(`E2E Life Kettle ${RUN}`, { stock: 10, priceCents: 3450 });
  items.cancel = await createItem(`E2E Life Toaster ${RUN}`, { stock: 10, priceCents: 2900 });
  items.third = await createItem(`E2E Life Blender ${RUN}`, { stock: 10, priceCents: 8900 });
  items.refused = await createItem(`E2E Life Mixer ${RUN}`, { stock: 10, priceCents: 12900 });
  items.flaky = await createItem(`E2E Life Grinder ${RUN}`, { stock: 10, priceCents: 4500 });
  items.life = await createItem(`E2E Life Lamp ${RUN}`, { stock: 10, priceCents: 2500 });
  // Starts in an hour, paused meanwhile: the shop says Paused, not "Starts in".
  const now = Date.now();
  const later = await apiCall('/admin/api/items', {
    method: 'POST',
    token: ADMIN_TOKEN,
    body: {
      name: `E2E Life Drone ${RUN}`,
      priceCents: 1_234_500,
      stock: 25_000,
      startsAt: new Date(now + 3_600_000).toISOString(),
      endsAt: new Date(now + 7_200_000).toISOString(),
    },
  });
  assert.equal(later.status, 201, JSON.stringify(later.data));
  items.later = later.data;
  assert.equal((await apiCall(`/admin/api/items/${items.later.id}/pause`, { method: 'POST', token: ADMIN_TOKEN })).status, 200);

  const policy = await apiCall('/admin/api/policies/seckill', { token: ADMIN_TOKEN });
  userThresholdBefore = policy.data.rules.find((r) => r.name === 'user').threshold;
  await setUserRule(3);
});

after(async () => {
  for (const c of clients) await c.context.close().catch(() => {});
  if (browser) await browser.close();
  if (userThresholdBefore !== null && userThresholdBefore !== 3) await setUserRule(userThresholdBefore).catch(() => {});
});

async function client(ipN, options) {
  const c = await newClient(browser, ipN, options);
  clients.push(c);
  return c;
}

/** The card of an item on the shopper page. */
function card(page, name) {
  return page.locator('li.item-card').filter({ has: page.getByRole('heading', { name, exact: true }) });
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

/** A purchase through the API by a shopper of this file; the order. */
async function apiPurchase(n, itemId) {
  const token = await shopperToken(userId(n));
  const res = await apiCall('/seckill', { method: 'POST', token, ip: apiIp(n), body: { itemId } });
  assert.equal(res.status, 200, JSON.stringify(res.data));
  return { token, order: res.data };
}

/** The Idempotency-Key of every purchase the page sends, in order. */
function watchPurchases(page) {
  const keys = [];
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/seckill') keys.push(r.headers()['idempotency-key']);
  });
  return keys;
}

/** `<name>-desktop.png` and `<name>-phone.png` of `focus` (an element, or the screen at it). */
async function screenshots(page, name, focus, { element = false, settle = 0 } = {}) {
  const shots = [];
  for (const [label, viewport] of [['desktop', DESKTOP], ['phone', PHONE]]) {
    await page.setViewportSize(viewport);
    if (settle) await new Promise((resolve) => setTimeout(resolve, settle));
    const path = artifactPath(`${name}-${label}.png`);
    if (element) {
      await withBarAtTop(page, () => focus.screenshot({ path, animations: 'disabled' }));
    } else {
      await focus.evaluate((node) => node.scrollIntoView({ block: 'start' }));
      await page.screenshot({ path, animations: 'disabled' });
    }
    shots.push(path);
    if (label === 'phone') {
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(width <= PHONE.width, `${page.url()} is ${width}px wide on a ${PHONE.width}px screen`);
    }
  }
  await page.setViewportSize(DESKTOP);
  return shots;
}

test('L1. a shopper buys and pays on the card, cancels after a confirmation, and meets the limiter with a countdown', async () => {
  const { page, problems } = await client(21);
  await withFailureShots('life1', () => ({ shopper: page }), async () => {
    await signInShopper(page, userId(21));

    // Buy: the card says by when to pay, with the time left, Pay and Cancel; Buy is off.
    const kettle = card(page, items.pay.name);
    await buyNow(page, kettle);
    const [orderId] = await waitForText(kettle.locator('.item-outcome'), ORDER_ID);
    const held = kettle.getByRole('group', { name: items.pay.name });
    await waitForText(held.locator('.held-title'), /^Purchased — pay by \d{1,2}:\d\d( [AP]M)?$/);
    const mine = await apiCall('/api/orders/mine', { token: await shopperToken(userId(21)), ip: apiIp(21) });
    const payBy = mine.data.orders.find((o) => o.orderId === orderId).payBy;
    const clock = await page.evaluate(
      (iso) => new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit' }).format(new Date(iso)),
      payBy,
    );
    assert.equal((await held.locator('.held-title').textContent()).trim(), `Purchased — pay by ${clock}`);
    const [, minutes] = await waitForText(held.getByRole('timer'), /^(1[45]):\d\d left to pay\./);
    assert.ok(Number(minutes) >= 14);
    assert.ok(await kettle.getByRole('button', { name: 'Purchased' }).isDisabled());

    // Pay on the card: Paid, the buttons gone; My orders agrees.
    await held.getByRole('button', { name: `Pay for ${items.pay.name}` }).click();
    await waitForText(held.locator('.held-title'), /^Paid$/);
    await waitForText(kettle.locator('.item-outcome'), new RegExp(`^Paid: ${items.pay.name} is yours\\.$`));
    assert.equal(await held.getByRole('button').count(), 0);
    const orders = page.getByRole('region', { name: 'My orders' });
    await orders.getByRole('listitem').filter({ hasText: orderId }).getByText('Paid', { exact: true }).waitFor();

    // Cancel asks first; "Keep the order" keeps it, "Cancel the order" gives the unit back.
    const toaster = card(page, items.cancel.name);
    await buyNow(page, toaster);
    const toasterHeld = toaster.getByRole('group', { name: items.cancel.name });
    await waitForText(toasterHeld.locator('.held-title'), /^Purchased — pay by /);
    await waitForText(toaster.locator('.stock-text'), /^9 of 10 left$/);
    await toasterHeld.getByRole('button', { name: `Cancel the order of ${items.cancel.name}` }).click();
    const ask = page.getByRole('dialog', { name: `Cancel your order of ${items.cancel.name}?` });
    await ask.waitFor();
    assert.match(await ask.textContent(), /goes back on sale/);
    await ask.getByRole('button', { name: 'Keep the order' }).click();
    await ask.waitFor({ state: 'detached' });
    assert.match(await toasterHeld.locator('.held-title').textContent(), /^Purchased — pay by /);
    await toasterHeld.getByRole('button', { name: `Cancel the order of ${items.cancel.name}` }).click();
    await ask.getByRole('button', { name: 'Cancel the order' }).click();
    await waitForText(toaster.locator('.item-outcome'), new RegExp(`^Order cancelled: the unit of ${items.cancel.name} is back on sale\\.$`));
    await toasterHeld.waitFor({ state: 'hidden' });
    assert.ok(await toaster.getByRole('button', { name: 'Buy now' }).isEnabled());
    await waitForText(toaster.locator('.stock-text'), /^10 of 10 left$/);

    // A third purchase passes; the fourth within the minute meets the user rule: its
    // message, and Buy off with a countdown that runs.
    const blender = card(page, items.third.name);
    await buyNow(page, blender);
    await waitForText(blender.locator('.held-title'), /^Purchased — pay by /);
    const mixer = card(page, items.refused.name);
    await buyNow(page, mixer);
    await waitForText(
      mixer.locator('.item-outcome'),
      /^No duplicate submissions\. You can try again in (\d+ s|1 min)( \d+ s)? \(at .+\)\.$/,
    );
    const wait = mixer.getByRole('button', { name: /^Try again in / });
    const [, first] = await waitForText(wait, /^Try again in 00:(\d\d)$/);
    assert.ok(await wait.isDisabled());
    const [, later] = await waitForText(wait, new RegExp(`^Try again in 00:(?!${first})(\\d\\d)$`), 3_000);
    assert.ok(Number(later) < Number(first), `the countdown runs: ${first} then ${later}`);
    assert.equal(await mixer.locator('.held').isHidden(), true);

    await screenshots(page, 'life-shopper', kettle);
    assert.deepEqual(problems, []);
  });
});

test('L2. an answer that leaves the order open is said plainly; the retry carries the same key; a paused item to come says Paused', async () => {
  const { page, problems } = await client(22);
  await withFailureShots('life2', () => ({ shopper: page }), async () => {
    await signInShopper(page, userId(22));
    const keys = watchPurchases(page);
    const grinder = card(page, items.flaky.name);

    // No answer at all: the purchase never reached the server.
    await page.route('**/seckill', (route) => route.abort('connectionreset'));
    await buyNow(page, grinder);
    await waitForText(grinder.locator('.item-outcome'), /^We could not confirm your purchase/);
    assert.equal(
      (await grinder.locator('.item-outcome').textContent()).trim(),
      `${UNCONFIRMED} (No answer reached this page.)`,
    );
    await page.unroute('**/seckill');

    // Again: this time the order is made, but a proxy answers 502 without JSON.
    await page.route('**/seckill', async (route) => {
      await route.fetch();
      await route.fulfill({ status: 502, contentType: 'text/html', body: '<html><body>Bad gateway</body></html>' });
    });
    await buyNow(page, grinder);
    await waitForText(grinder.locator('.item-outcome'), /HTTP 502/);
    assert.equal(
      (await grinder.locator('.item-outcome').textContent()).trim(),
      `${UNCONFIRMED} (The server answered with an error, HTTP 502.)`,
    );
    await page.unroute('**/seckill');
    assert.equal(keys.length, 2);
    assert.equal(keys[1], keys[0], 'the retry of an unanswered purchase reuses its Idempotency-Key');

    // The order did land: My orders finds it, and the card shows it.
    await waitForText(grinder.locator('.held-title'), /^Purchased — pay by /);
    assert.ok(await grinder.getByRole('button', { name: 'Purchased' }).isDisabled());
    const mine = await apiCall('/api/orders/mine', { token: await shopperToken(userId(22)), ip: apiIp(22) });
    assert.equal(mine.data.orders.filter((o) => o.itemId === items.flaky.id).length, 1, 'one order, not two');

    // Paused before its start: "Paused", not a countdown to a start that will not sell.
    const drone = card(page, items.later.name);
    await waitForText(drone.locator('.badge'), /^Paused$/);
    assert.ok(await drone.getByRole('button', { name: 'Paused' }).isDisabled());
    // Thousands separators.
    await waitForText(drone.locator('.stock-text'), /^25,000 of 25,000 left$/);
    assert.equal((await drone.locator('.price').textContent()).trim(), '$12,345.00');
    assert.deepEqual(problems, []);
  });
});

test('L3. an operator edits, ends and archives an item; the shop follows; the item history says who did what', async () => {
  const admin = await client(23);
  const shopper = await client(24);
  const adminPage = admin.page;
  const shopperPage = shopper.page;
  await withFailureShots('life3', () => ({ admin: adminPage, shopper: shopperPage }), async () => {
    // Two orders of the lamp: one paid.
    const a = await apiPurchase(25, items.life.id);
    await apiPurchase(26, items.life.id);
    const paid = await apiCall(`/api/orders/${a.order.orderId}/pay`, { method: 'POST', token: a.token, ip: apiIp(25) });
    assert.equal(paid.status, 200, JSON.stringify(paid.data));

    await signInShopper(shopperPage, userId(24));
    const lampCard = card(shopperPage, items.life.name);
    await waitForText(lampCard.locator('.stock-text'), /^8 of 10 left$/);

    await signInAdmin(adminPage);
    const section = adminPage.getByRole('region', { name: 'Items', exact: true });
    const row = adminPage.locator(`#item-rows tr[data-item-id="${items.life.id}"]`);
    await row.waitFor();

    // The search narrows the table to the lamp, by name or by id.
    await section.getByLabel('Search items').fill(items.life.name);
    await eventually(async () => assert.equal(await adminPage.locator('#item-rows tr:visible').count(), 1));
    // As `#<id>`: a bare id such as 2 is also in every "E2E …" name.
    await section.getByLabel('Search items').fill(`#${items.life.id}`);
    await eventually(async () => assert.equal(await adminPage.locator('#item-rows tr:visible').count(), 1));
    assert.ok(await row.isVisible());

    // What it sold: 2 units (1 awaiting payment), 20 % of 10, one paid order's revenue.
    await eventually(async () => {
      assert.equal(await row.locator('[data-sold]').getAttribute('data-sold'), '2');
      assert.equal(await row.locator('[data-sold]').getAttribute('data-held'), '1');
      assert.match(await row.locator('.share-text').textContent(), /^20\s?%$/);
      assert.equal((await row.locator('td[data-label="Revenue (paid)"]').textContent()).trim(), '$25.00');
      assert.equal((await row.locator('td[data-label="Sold out after"]').textContent()).trim(), '–');
    });

    // Edit: a stock below what is sold is refused next to the field, with the floor.
    await row.getByRole('button', { name: `Edit item ${items.life.id} (${items.life.name})` }).click();
    const edit = adminPage.getByRole('dialog', { name: `Edit item ${items.life.id}: ${items.life.name}` });
    await edit.waitFor();
    await edit.getByLabel('Total stock').fill('1');
    await edit.getByRole('button', { name: 'Save changes' }).click();
    await waitForText(adminPage.locator('#edit-stock-error'), /^At least 2: that many units are sold or held by unpaid orders\.$/);
    assert.equal(await edit.getByLabel('Total stock').getAttribute('aria-invalid'), 'true');
    await screenshots(adminPage, 'life-admin-edit', edit, { element: true });

    // Name, price and stock saved; the row and the shop follow.
    const renamed = `${items.life.name} Deluxe`;
    await edit.getByLabel('Name').fill(renamed);
    await edit.getByLabel('Price').fill('30.00');
    await edit.getByLabel('Total stock').fill('12');
    await edit.getByRole('button', { name: 'Save changes' }).click();
    await edit.waitFor({ state: 'detached' });
    await waitForText(adminPage.locator('#notice'), new RegExp(`^Saved item ${items.life.id} \\(${renamed}\\)\\.$`));
    await waitForText(row.locator('.item-title'), new RegExp(`^${renamed}$`));
    assert.match(await row.textContent(), /\$30\.00/);
    await waitForText(row.locator('td[data-label="Stock left"]'), /^10 \/ 12$/);
    const renamedCard = card(shopperPage, renamed);
    await waitForText(renamedCard.locator('.price'), /^\$30\.00$/);
    await waitForText(renamedCard.locator('.stock-text'), /^10 of 12 left$/);

    // End now asks first; going back changes nothing.
    const endButton = row.getByRole('button', { name: `End the sale of item ${items.life.id} (${renamed}) now` });
    await endButton.click();
    const confirmEnd = adminPage.getByRole('dialog', { name: `End the sale of ${renamed} now?` });
    await confirmEnd.getByRole('button', { name: 'Go back' }).click();
    await confirmEnd.waitFor({ state: 'detached' });
    await waitForText(row.locator('.badge'), /^On sale$/);
    await endButton.click();
    await confirmEnd.getByRole('button', { name: 'End the sale now' }).click();
    await waitForText(row.locator('.badge'), /^Ended$/);
    assert.ok(await endButton.isDisabled());
    // The shop: the card is gone, and a purchase is refused as ended.
    await renamedCard.waitFor({ state: 'detached' });
    const late = await apiCall('/seckill', {
      method: 'POST',
      token: await shopperToken(userId(27)),
      ip: apiIp(27),
      body: { itemId: items.life.id },
    });
    assert.equal(late.data.code, 'SALE_ENDED');

    // Archive: gone from the default list; "Show archived" lists it, archived.
    await row.getByRole('button', { name: `Archive item ${items.life.id} (${renamed})` }).click();
    const confirmArchive = adminPage.getByRole('dialog', { name: `Archive ${renamed}?` });
    await confirmArchive.getByRole('button', { name: 'Archive the item' }).click();
    await waitForText(adminPage.locator('#notice'), new RegExp(`^Archived item ${items.life.id} `));
    await row.waitFor({ state: 'detached' });
    await section.getByLabel('Show archived').check();
    await waitForText(row.locator('.badge'), /^Archived$/);
    assert.ok(await row.getByRole('button', { name: /^Edit item / }).isDisabled());
    assert.ok(await row.getByRole('button', { name: /^Archive item / }).isDisabled());
    const listed = await apiCall('/api/items');
    assert.equal(listed.data.items.some((i) => i.id === items.life.id), false, 'not in the shop');

    // Its history, newest first: archived, ended, edited (what changed), created.
    await row.getByRole('button', { name: `History of item ${items.life.id} (${renamed})` }).click();
    const history = adminPage.getByRole('dialog', { name: `History of item ${items.life.id}: ${renamed}` });
    await waitForText(history.getByRole('status'), /^\d+ changes?, newest first\.$/);
    const actions = await history.locator('li.audit-entry').evaluateAll((nodes) => nodes.map((n) => n.dataset.action));
    assert.deepEqual(actions, ['archive', 'end', 'edit', 'create']);
    const edited = history.locator('li.audit-entry[data-action="edit"]');
    assert.match(await edited.textContent(), new RegExp(`^Edited by ${ADMIN_NAME} · `));
    assert.match(await edited.textContent(), /price \$25\.00 → \$30\.00/);
    assert.match(await edited.textContent(), /stock 10 → 12/);
    await screenshots(adminPage, 'life-admin-history', history, { element: true });
    await history.getByRole('button', { name: 'Close' }).click();
    await section.getByLabel('Search items').fill('');
    await section.getByLabel('Show archived').uncheck();

    assert.deepEqual(admin.problems, []);
    assert.deepEqual(shopper.problems, []);
  });
});

test('L4. orders show item, amount, state in words and times; search by order id and user; the export downloads the filtered CSV', async () => {
  const admin = await client(28);
  const page = admin.page;
  await withFailureShots('life4', () => ({ admin: page }), async () => {
    await signInAdmin(page);
    const orders = page.getByRole('region', { name: 'Orders', exact: true });
    await orders.getByLabel('Item id').fill(String(items.life.id));
    await orders.getByRole('button', { name: 'Search' }).click();
    await waitForText(orders.locator('#orders-total'), /^2 orders$/);
    const rows = orders.locator('#order-rows tr');
    await eventually(async () => assert.equal(await rows.count(), 2));
    const paidRow = rows.filter({ has: page.getByText('Paid', { exact: true }) });
    const unpaidRow = rows.filter({ has: page.getByText('Awaiting payment', { exact: true }) });
    assert.equal(await paidRow.count(), 1);
    assert.equal(await unpaidRow.count(), 1);
    assert.match(await paidRow.locator('td[data-label="Item"]').textContent(), new RegExp(`${items.life.name}.*#${items.life.id}`));
    assert.match(await paidRow.locator('td[data-label="Amount"]').textContent(), /^\$\d+\.\d\d$/);
    assert.equal(await paidRow.locator('td[data-label="Paid"] time').count(), 1);
    assert.equal((await unpaidRow.locator('td[data-label="Paid"]').textContent()).trim(), '–');
    const unpaidId = await unpaidRow.getAttribute('data-order-id');
    const unpaidUser = (await unpaidRow.locator('td[data-label="User"]').textContent()).trim();

    // By order id alone.
    await orders.getByLabel('Item id').fill('');
    await orders.getByLabel('Order id').fill(unpaidId);
    await orders.getByRole('button', { name: 'Search' }).click();
    await waitForText(orders.locator('#orders-total'), /^1 order$/);
    assert.equal(await rows.first().getAttribute('data-order-id'), unpaidId);
    // Not an order id: said next to the field, nothing asked.
    await orders.getByLabel('Order id').fill('abc');
    await orders.getByRole('button', { name: 'Search' }).click();
    await waitForText(page.locator('#filter-order-error'), /^Enter a whole order id/);
    // By user.
    await orders.getByLabel('Order id').fill('');
    await orders.getByLabel('User id').fill(unpaidUser);
    await orders.getByRole('button', { name: 'Search' }).click();
    await waitForText(orders.locator('#orders-total'), /^1 order$/);
    assert.equal(await rows.first().getAttribute('data-order-id'), unpaidId);

    // Export: the item's orders as CSV, every page, header first.
    await orders.getByLabel('User id').fill('');
    await orders.getByLabel('Item id').fill(String(items.life.id));
    const [download] = await Promise.all([
      page.waitForEvent('download'),
      orders.getByRole('button', { name: 'Export CSV' }).click(),
    ]);
    assert.match(download.suggestedFilename(), /\.csv$/);
    const csv = await readFile(await download.path(), 'utf8');
    const lines = csv.split(/\r?\n/).filter((line) => line !== '');
    assert.equal(lines[0], CSV_HEADER);
    assert.equal(lines.length, 3, csv);
    for (const line of lines.slice(1)) {
      const cells = line.split(',');
      assert.match(cells[0], ORDER_ID);
      assert.equal(cells[1], String(items.life.id));
    }
    assert.ok(lines.some((line) => line.startsWith(`${unpaidId},`)));
    await waitForText(orders.locator('#orders-exported'), /^Downloaded .+\.csv \(\d+ KB\)/);

    await screenshots(page, 'life-admin-orders', orders, { element: true });
    assert.deepEqual(admin.problems, []);
  });
});

test('L5. the dashboard: tiles counted once, stock as a share for the items picked, a sticky navigation, every column on a phone', async () => {
  const admin = await client(29);
  const page = admin.page;
  await withFailureShots('life5', () => ({ admin: page }), async () => {
    await signInAdmin(page);
    // The tiles: numbers from the server (not a dash), refusals per dimension.
    await waitForText(page.locator('#stat-admitted'), /^[\d,]+$/);
    for (const tile of ['#stat-orders', '#stat-sold-out', '#stat-already-purchased', '#stat-refused', '#stat-errors']) {
      assert.match((await page.locator(tile).textContent()).trim(), /^[\d,]+$/, tile);
    }
    assert.match(await page.locator('#stat-refused-detail').textContent(), /^api [\d,]+ · user [\d,]+ · ip [\d,]+/);

    // The stock chart: the items on sale now, each as a share of its total (≤ 100 %).
    const kettleLine = `svg[data-chart="stock"] [data-series="item:${items.pay.id}"]`;
    await page.locator(kettleLine).waitFor({ state: 'attached' });
    const values = (await page.locator(kettleLine).getAttribute('data-values')).split(',').filter((v) => v !== '').map(Number);
    assert.equal(values.at(-1), 90, 'the kettle: 9 of 10 left');
    assert.ok(values.every((v) => v >= 0 && v <= 100));
    const picker = page.locator('.item-picker');
    await waitForText(picker.locator('summary'), /^Items: \d+ of \d+ shown \(on sale now\)$/);
    assert.equal(await page.locator(`svg[data-chart="stock"] [data-series="item:${items.later.id}"]`).count(), 0, 'not started: not on sale now');
    await picker.locator('summary').click();
    await picker.getByLabel(`#${items.pay.id} ${items.pay.name}`, { exact: true }).uncheck();
    await page.locator(kettleLine).waitFor({ state: 'detached' });
    await waitForText(picker.locator('summary'), /^Items: \d+ of \d+ shown$/);
    await picker.getByRole('button', { name: 'Items on sale now' }).click();
    await page.locator(kettleLine).waitFor({ state: 'attached' });

    // The navigation stays on screen at the orders, the last section.
    await page.getByRole('navigation', { name: 'Dashboard sections' }).getByRole('link', { name: 'Orders' }).click();
    await eventually(async () => {
      const nav = await page.locator('#admin-nav').boundingBox();
      assert.ok(nav && nav.y >= 0 && nav.y < 120, `the navigation is at ${nav && nav.y}`);
      const title = await page.locator('#orders-title').boundingBox();
      assert.ok(title && title.y >= nav.y + nav.height, 'the section starts below the bar');
    });

    const shots = [];
    for (const [label, viewport] of [['desktop', DESKTOP], ['phone', PHONE]]) {
      await page.setViewportSize(viewport);
      await new Promise((resolve) => setTimeout(resolve, 1_200)); // the charts redraw for the width
      const path = artifactPath(`life-admin-${label}.png`);
      const itemsPath = artifactPath(`life-admin-items-${label}.png`);
      const livePath = artifactPath(`life-admin-live-${label}.png`);
      const stockPath = artifactPath(`life-admin-stock-${label}.png`);
      await withBarAtTop(page, async () => {
        await page.screenshot({ path, fullPage: true, animations: 'disabled' });
        await page.getByRole('region', { name: 'Items', exact: true }).screenshot({ path: itemsPath, animations: 'disabled' });
        await page.locator('section').filter({ has: page.locator('#stats-title') }).screenshot({ path: livePath });
        await page.locator('figure').filter({ has: page.locator('#chart-stock-title') }).screenshot({ path: stockPath });
      });
      shots.push(path, itemsPath, livePath, stockPath);
      // The date filters are wide enough for a whole date and time.
      for (const id of ['#filter-from', '#filter-to']) {
        const box = await page.locator(id).boundingBox();
        assert.ok(box.width >= 240, `${label}: ${id} is ${box.width}px wide`);
      }

    }
    // On a phone: nothing wider than the screen, the tables stacked (every cell with its
    // label, none cut off).
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= PHONE.width, `the dashboard is ${width}px wide on a ${PHONE.width}px screen`);
    const cut = await page.evaluate(() =>
      [...document.querySelectorAll('.stack-on-phone td, .stack-on-phone th')]
        .filter((cell) => cell.offsetParent !== null && cell.scrollWidth > cell.clientWidth + 1)
        .map((cell) => `${cell.dataset.label || cell.textContent.trim().slice(0, 20)}: ${cell.scrollWidth} > ${cell.clientWidth}`),
    );
    assert.deepEqual(cut, [], 'no table cell cut off');
    assert.equal(await page.locator('#item-rows').evaluate((node) => getComputedStyle(node.closest('table').querySelector('thead')).position), 'absolute');
    const nav = await page.locator('#admin-nav').boundingBox();
    assert.ok(nav.y >= 0 && nav.y < 150, `on a phone the navigation is at ${nav.y}`);
    await page.setViewportSize(DESKTOP);
    console.log(`screenshots:\n${shots.map((s) => `  ${s}`).join('\n')}`);
    assert.deepEqual(admin.problems, []);
  });
});

test('L6. an item and its waiting room are made in one form; the room is on in its panel and in force; each room change is in the item history', async () => {
  const admin = await client(40);
  const page = admin.page;
  await withFailureShots('life6', () => ({ admin: page }), async () => {
    await signInAdmin(page);
    const name = `E2E Life Queued Drone ${RUN}`;
    const form = page.locator('#create-form');
    await form.getByLabel('Name').fill(name);
    await form.getByLabel('Price').fill('499.00');
    await form.getByLabel('Stock').fill('3');
    // The room's fields show only once it is turned on.
    assert.equal(await form.getByLabel('Admitted per second').isVisible(), false);
    await form.getByLabel('Queue shoppers for this item').check();
    await form.getByLabel('Order').selectOption('random');
    await form.getByLabel('Admitted per second').fill('5');
    await form.getByLabel('Pass valid for (min)').fill('3');
    await screenshots(page, 'admin-create-with-room', form, { element: true });
    const sent = page.waitForRequest((r) => r.method() === 'POST' && new URL(r.url()).pathname === '/admin/api/items');
    await form.getByRole('button', { name: 'Create item' }).click();
    assert.deepEqual((await sent).postDataJSON().waitingRoom, { enabled: true, order: 'random', admitPerSecond: 5, passTtlSecs: 180 });
    await waitForText(
      page.locator('#create-result'),
      new RegExp(`^Created item (\\d+): ${name} \\(3 units, through its waiting room\\)\\.$`),
    );
    const id = Number((await page.locator('#create-result').textContent()).match(/^Created item (\d+)/)[1]);

    // In force from the 201: a purchase without a pass is refused.
    const bare = await apiCall('/seckill', { method: 'POST', token: await shopperToken(userId(41)), ip: apiIp(41), body: { itemId: id } });
    assert.deepEqual([bare.status, bare.data.code], [403, 'NOT_ADMITTED']);

    // Its panel shows the room on, as made.
    const row = page.locator(`#item-rows tr[data-item-id="${id}"]`);
    await row.getByRole('button', { name: `Waiting room of item ${id} (${name})` }).click();
    const panel = page.locator('#room-form');
    await eventually(async () => {
      assert.equal(await panel.getByLabel('Queue shoppers for this item').isChecked(), true);
      assert.equal(await panel.getByLabel('Order').inputValue(), 'random');
      assert.equal(await panel.getByLabel('Admitted per second').inputValue(), '5');
      assert.equal(await panel.getByLabel('Pass valid for (s)').inputValue(), '180');
    });
    // A change of rate there.
    await panel.getByLabel('Admitted per second').fill('8');
    await panel.getByRole('button', { name: 'Save waiting room' }).click();
    await waitForText(page.locator('#room-result'), new RegExp(`^Saved the waiting room of item ${id} \\(version 2\\)`));

    // The history: created, the room made with it, the change; who, and what changed.
    await row.getByRole('button', { name: `History of item ${id} (${name})` }).click();
    const history = page.getByRole('dialog', { name: `History of item ${id}: ${name}` });
    await waitForText(history.getByRole('status'), /^3 changes, newest first\.$/);
    const entries = history.locator('li.audit-entry');
    assert.deepEqual(await entries.evaluateAll((nodes) => nodes.map((n) => n.dataset.action)), ['room', 'room', 'create']);
    const changes = async (n) => entries.nth(n).locator('.audit-changes li').allTextContents();
    assert.match(await entries.nth(0).locator('.audit-head').textContent(), new RegExp(`^Waiting room set by ${ADMIN_NAME} · `));
    assert.deepEqual(await changes(0), ['admitted per second 5 → 8']);
    assert.deepEqual(await changes(1), [
      'waiting room off → on',
      'order First come, first served → Random',
      'admitted per second 50 → 5',
      'pass valid for 120 s → 180 s',
    ]);
    await screenshots(page, 'admin-item-history-room', history, { element: true });
    await history.getByRole('button', { name: 'Close' }).click();
    assert.deepEqual(admin.problems, []);
  });
});
