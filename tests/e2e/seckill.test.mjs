// End-to-end: the shopper page and the admin dashboard in headless Chromium against a
// running app. The scenarios run in order (node:test runs a file's tests one by one):
// scenario 3 lowers the `user` rule for everybody, so it comes after 1 and 2; scenario 4
// switches the sale policy's scope to per_item and back to global; scenario 5's burst is
// the only purchasing while it runs, so its seconds in the charts are its own.
//
//   E2E_BASE_URL=http://127.0.0.1:PORT E2E_ADMIN_TOKEN=… node --test seckill.test.mjs
//
// scripts/e2e.sh starts a private app and runs this file.
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
const USER_MESSAGE = 'No duplicate submissions';

let browser;
const items = {};
const clients = [];

before(async () => {
  browser = await launchBrowser();
  // Every scenario buys its own items, so stock and "already purchased" never mix.
  items.first = await createItem(`E2E Headphones ${RUN}`, { priceCents: 4999 });
  for (const n of [1, 2, 3, 4]) {
    items[`batch${n}`] = await createItem(`E2E Batch ${n} ${RUN}`, { priceCents: 100 * n + 99 });
  }
  items.other = await createItem(`E2E Smartwatch ${RUN}`, { priceCents: 12900 });
  items.probe = await createItem(`E2E Probe ${RUN}`, { stock: 1000, priceCents: 1 });
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

/** The card of an item on the shopper page. */
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

/** Presses Buy now on an item and returns the outcome text shown on its card. */
async function buy(page, name, expected) {
  const c = card(page, name);
  await buyNow(page, c);
  const status = c.getByRole('status');
  await waitForText(status, expected);
  return (await status.textContent()).trim();
}

async function signInAdmin(page) {
  await page.goto('/admin/');
  await page.getByLabel('Admin token').fill(ADMIN_TOKEN);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByText(`Signed in as ${ADMIN_NAME}`, { exact: true }).waitFor();
}

/**
 * Rule changes reach the limiter through a version key polled every 500 ms. Probes the
 * sale with throw-away shoppers (own user id and address each, on a dedicated item) until
 * the answer's RateLimit-Policy header shows the new quota, so the next assertion does
 * not race the reload.
 */
async function waitForUserQuota(quota, windowSeconds) {
  const want = `"user";q=${quota};w=${windowSeconds}`;
  let n = 0;
  let seen = '';
  await eventually(
    async () => {
      n += 1;
      const user = userId(90 + n);
      const token = await shopperToken(user);
      const res = await apiCall('/seckill', {
        method: 'POST',
        token,
        ip: `10.78.${n % 250}.${(n * 7) % 250}`,
        body: { itemId: items.probe.id },
      });
      seen = res.headers.get('ratelimit-policy') || `(status ${res.status}, no header)`;
      if (!seen.includes(want)) throw new Error(`ratelimit-policy is ${seen}`);
    },
    { timeout: 10_000, interval: 200 },
  ).catch(() => {
    throw new Error(`the limiter did not pick up ${want} within 10 s (last: ${seen})`);
  });
}

test('1. a shopper signs in, buys, sees the order in My orders; Buy stays off for the item bought, and the server refuses a second purchase', async () => {
  const { page, problems } = await client(1);
  await withFailureShots('scenario1', () => ({ shopper: page }), async () => {
    const user = userId(1);
    await signInShopper(page, user);

    const item = card(page, items.first.name);
    await item.getByText('On sale', { exact: true }).waitFor();
    assert.match(await item.locator('.price').textContent(), /\$49\.99/);

    // Buy asks first, naming the item and its price; nothing is sent until the shopper
    // confirms, so "Not now" costs no purchase (and no limiter count).
    const purchases = [];
    page.on('request', (r) => {
      if (r.method() === 'POST' && new URL(r.url()).pathname === '/seckill') purchases.push(r);
    });
    await item.getByRole('button', { name: 'Buy now' }).click();
    const ask = page.getByRole('dialog', { name: `Buy ${items.first.name} for $49.99?` });
    await ask.waitFor();
    await page.screenshot({ path: artifactPath('shopper-confirm-buy.png') });
    await ask.getByRole('button', { name: 'Not now' }).click();
    await ask.waitFor({ state: 'detached' });
    assert.equal(purchases.length, 0, 'Not now sent no purchase');

    // A double click opens one confirmation, and its press sends one purchase.
    await item.getByRole('button', { name: 'Buy now' }).dblclick();
    await ask.waitFor();
    assert.equal(await page.getByRole('dialog').count(), 1, 'one confirmation');
    assert.equal(purchases.length, 0, 'nothing sent before the confirmation');
    await ask.getByRole('button', { name: 'Buy for $49.99' }).click();
    const [orderId] = await waitForText(item.getByRole('status'), ORDER_ID);
    const outcome = (await item.getByRole('status').textContent()).trim();
    assert.equal(outcome, `Order placed for ${items.first.name}. Order id: ${orderId}`);
    assert.equal(purchases.length, 1, 'a double click sent one purchase');
    const key = purchases[0].headers()['idempotency-key'];
    assert.match(key, /^[A-Za-z0-9_-]{1,64}$/, 'every purchase carries an Idempotency-Key');

    // My orders shows it (its id and the item's name).
    const orders = page.getByRole('region', { name: 'My orders' });
    const row = orders.getByRole('listitem').filter({ hasText: orderId });
    await row.waitFor();
    assert.match(await row.textContent(), new RegExp(items.first.name));

    // It awaits payment, with the time left to pay; Pay makes it paid, buttons gone.
    await row.getByText('Awaiting payment', { exact: true }).waitFor();
    await waitForText(row.getByRole('timer'), /^Pay within 1[45]:\d\d$/);
    await row.getByRole('button', { name: 'Pay' }).click();
    await row.getByText('Paid', { exact: true }).waitFor();
    assert.equal(await row.getByRole('button', { name: 'Cancel' }).count(), 0);

    // Stock went down by one, live.
    await waitForText(item.locator('.stock-text'), /^49 of 50 left$/);

    // Still signed in after a reload, orders included.
    await page.reload();
    await page.getByText(`Signed in as user ${user}`, { exact: true }).waitFor();
    await orders.getByRole('listitem').filter({ hasText: orderId }).waitFor();

    // The card knows the order: it says Paid, and Buy stays off (one per customer).
    await waitForText(item.locator('.held-title'), /^Paid$/);
    const bought = item.getByRole('button', { name: 'Purchased' });
    assert.ok(await bought.isDisabled());
    // A purchase that gets through anyway is refused by the server.
    const again = await apiCall('/seckill', {
      method: 'POST',
      token: await shopperToken(user),
      ip: '10.79.0.9',
      body: { itemId: items.first.id },
    });
    assert.equal(again.data.code, 'ALREADY_PURCHASED');

    // Sign out forgets the session.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('User id').waitFor();
    assert.equal(await page.evaluate(() => localStorage.getItem('seckill.session')), null);
    await item.getByRole('button', { name: 'Sign in to buy' }).waitFor();
    assert.ok(await item.getByRole('button', { name: 'Sign in to buy' }).isDisabled());
    assert.deepEqual(problems, []);
  });
});

test('2. the fourth purchase within the minute shows the user limit message', async () => {
  const { page, problems } = await client(2);
  await withFailureShots('scenario2', () => ({ shopper: page }), async () => {
    await signInShopper(page, userId(2));
    for (const n of [1, 2, 3]) {
      const text = await buy(page, items[`batch${n}`].name, ORDER_ID);
      assert.match(text, /^Order placed for /);
    }
    const refused = await buy(page, items.batch4.name, new RegExp(USER_MESSAGE));
    assert.match(
      refused,
      new RegExp(`^${USER_MESSAGE}\\. You can try again in (\\d+ s|1 min)( \\d+ s)? \\(at .+\\)\\.$`),
    );
    // The three orders, newest first.
    const orders = page.getByRole('region', { name: 'My orders' }).getByRole('listitem');
    await eventually(async () => assert.equal(await orders.count(), 3));
    assert.match(await orders.first().textContent(), new RegExp(items.batch3.name));
    assert.deepEqual(problems, []);
  });
});

test('3. an admin creates, pauses and resumes an item and lowers the user rule; the shopper meets it', async () => {
  const admin = await client(30);
  const shopper = await client(31);
  const adminPage = admin.page;
  const shopperPage = shopper.page;
  await withFailureShots('scenario3', () => ({ admin: adminPage, shopper: shopperPage }), async () => {
    // A wrong token is refused with a message; the right one signs in.
    await adminPage.goto('/admin/');
    await adminPage.getByLabel('Admin token').fill('not-the-token');
    await adminPage.getByRole('button', { name: 'Sign in', exact: true }).click();
    await waitForText(adminPage.locator('#sign-in-error'), /That token was not accepted/);
    await signInAdmin(adminPage);
    assert.equal(
      await adminPage.evaluate(() => localStorage.length),
      0,
      'the admin token is not kept in localStorage',
    );

    // Create an item; first with the end before the start: the server's error shows
    // next to the field.
    const name = `E2E Pause Test ${RUN}`;
    const create = adminPage.getByRole('region', { name: 'Create an item' });
    const [startValue, badEnd, goodEnd] = await adminPage.evaluate(() => {
      const local = (d) => {
        const p = (n) => String(n).padStart(2, '0');
        return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
      };
      const now = Date.now();
      return [local(new Date(now - 2 * 60_000)), local(new Date(now - 3_600_000)), local(new Date(now + 3_600_000))];
    });
    await create.getByLabel('Name').fill(name);
    await create.getByLabel('Price').fill('9.99');
    await create.getByLabel('Stock').fill('5');
    await create.getByLabel('Sale starts').fill(startValue);
    await create.getByLabel('Sale ends').fill(badEnd);
    await create.getByRole('button', { name: 'Create item' }).click();
    await waitForText(adminPage.locator('#item-ends-error'), /^endsAt must be after the sale's start \(startsAt\)$/);
    assert.equal(await create.getByLabel('Sale ends').getAttribute('aria-invalid'), 'true');

    await create.getByLabel('Sale ends').fill(goodEnd);
    await create.getByRole('button', { name: 'Create item' }).click();
    const [, itemId] = await waitForText(create.getByRole('status'), /^Created item (\d+): /);
    assert.ok(await adminPage.locator('#item-ends-error').isHidden());

    // It is listed with its stock; pause it.
    const row = adminPage.locator(`#item-rows tr[data-item-id="${itemId}"]`);
    await waitForText(row, /On sale/);
    assert.match(await row.textContent(), /5 \/ 5/);
    await row.getByRole('button', { name: `Pause item ${itemId} (${name})` }).click();
    await waitForText(row.locator('.badge'), /^Paused$/);
    await waitForText(adminPage.locator('#notice'), new RegExp(`^Paused the sale of item ${itemId} `));

    // The shopper sees it paused and cannot buy it.
    await signInShopper(shopperPage, userId(3));
    const item = card(shopperPage, name);
    await waitForText(item.locator('.badge'), /^Paused$/);
    const pausedButton = item.getByRole('button', { name: 'Paused' });
    assert.ok(await pausedButton.isDisabled());
    // The server says the same to a purchase that gets through anyway.
    const paused = await apiCall('/seckill', {
      method: 'POST',
      token: await shopperToken(userId(4)),
      ip: '10.79.0.1',
      body: { itemId: Number(itemId) },
    });
    assert.equal(paused.status, 409);
    assert.equal(paused.data.code, 'SALE_PAUSED');

    // Resume: the shopper's page follows within a poll.
    await row.getByRole('button', { name: `Resume item ${itemId} (${name})` }).click();
    await waitForText(row.locator('.badge'), /^On sale$/);
    await waitForText(item.locator('.badge'), /^On sale$/);
    assert.ok(await item.getByRole('button', { name: 'Buy now' }).isEnabled());

    // Rules editor: a zero window is refused with the server's message; 1 per 60 s is saved.
    const policy = adminPage.locator('form[data-policy="seckill"]');
    const windowInput = policy.getByLabel('Window (ms) of rule user');
    const thresholdInput = policy.getByLabel('Threshold of rule user');
    assert.equal(await windowInput.inputValue(), '60000');
    assert.equal(await thresholdInput.inputValue(), '3');
    await windowInput.fill('0');
    await policy.getByRole('button', { name: 'Save seckill' }).click();
    const [error] = await waitForText(policy.getByRole('alert'), /^Not saved: .+/);
    assert.match(error, /window/i);
    assert.equal(await windowInput.getAttribute('aria-invalid'), 'true');

    await windowInput.fill('60000');
    await thresholdInput.fill('1');
    assert.equal((await policy.locator('tr[data-rule="user"]').textContent()).includes('1 per 60 s'), true);
    await policy.getByRole('button', { name: 'Save seckill' }).click();
    await waitForText(policy.getByRole('status'), /^Saved policy seckill\./);
    assert.ok(await policy.getByRole('alert').isHidden());
    assert.equal(await thresholdInput.inputValue(), '1');

    // The audit list shows the change and who made it.
    const audit = adminPage.getByRole('region', { name: 'Rule changes' });
    const entry = audit.getByRole('listitem').filter({ hasText: `changed by ${ADMIN_NAME}` }).first();
    await waitForText(entry, /user: threshold 3 → 1/);
    assert.match(await entry.textContent(), new RegExp(`^seckill changed by ${ADMIN_NAME} · `));

    // Someone else saves the policy meanwhile: saving from this stale form is refused
    // with a word to the operator, and the form is reloaded with their version.
    const before = await apiCall('/admin/api/policies/seckill', { token: ADMIN_TOKEN });
    assert.match(await policy.locator('legend').textContent(), new RegExp(`version ${before.data.version}$`));
    const elsewhere = await apiCall('/admin/api/policies/seckill', {
      method: 'PUT',
      token: ADMIN_TOKEN,
      body: { rules: [{ name: 'api', threshold: 999 }] },
    });
    assert.equal(elsewhere.status, 200);
    const ipMessage = policy.getByLabel('Message of rule ip');
    const ipMessageBefore = await ipMessage.inputValue();
    await ipMessage.fill('Slow down a little');
    await policy.getByRole('button', { name: 'Save seckill' }).click();
    await waitForText(
      policy.getByRole('alert'),
      new RegExp(`^Not saved: someone else changed policy seckill since you loaded it \\(now version ${before.data.version + 1}\\)`),
    );
    assert.equal(await policy.getByLabel('Threshold of rule api').inputValue(), '999');
    assert.equal(await ipMessage.inputValue(), ipMessageBefore);
    assert.match(await policy.locator('legend').textContent(), new RegExp(`version ${before.data.version + 1}$`));

    await waitForUserQuota(1, 60);

    // The shopper's first purchase passes, the second (another item) meets the rule.
    const first = await buy(shopperPage, name, ORDER_ID);
    const [orderId] = first.match(ORDER_ID);
    const second = await buy(shopperPage, items.other.name, new RegExp(USER_MESSAGE));
    assert.match(second, new RegExp(`^${USER_MESSAGE}\\. You can try again in `));

    // The admin finds that order by user id, and the live counters saw the refusal.
    const orders = adminPage.getByRole('region', { name: 'Orders', exact: true });
    await orders.getByLabel('User id').fill(String(userId(3)));
    await orders.getByRole('button', { name: 'Search' }).click();
    await orders.locator(`tr[data-order-id="${orderId}"]`).waitFor();
    await waitForText(orders.locator('#orders-total'), /^1 order$/);
    assert.equal((await orders.locator('#orders-page').textContent()).trim(), 'Page 1 of 1');
    assert.ok(await orders.getByRole('button', { name: 'Next' }).isDisabled());

    const userRow = adminPage.locator('#dimension-rows tr[data-dimension="user"]');
    await eventually(async () => {
      const cells = await userRow.locator('td').allTextContents();
      assert.ok(Number(cells[1].replace(/\D/g, '')) >= 1, `user rejections: ${cells[1]}`);
    });
    await eventually(async () =>
      assert.ok(Number((await adminPage.locator('#stat-orders').textContent()).replace(/\D/g, '')) >= 1),
    );
    await waitForText(row, /4 \/ 5/);

    assert.deepEqual(admin.problems, []);
    assert.deepEqual(shopper.problems, []);
  });
});

test('4. an admin switches the sale policy to per_item scope and back; per_item on another policy is refused', async () => {
  const admin = await client(35);
  const page = admin.page;
  await withFailureShots('scenario4', () => ({ admin: page }), async () => {
    await signInAdmin(page);
    const seckill = page.locator('form[data-policy="seckill"]');
    const scope = seckill.getByLabel('Scope', { exact: true });
    const hint = seckill.locator('.scope-hint');
    const scopeError = page.locator('#policy-seckill-scope-error');

    // Loaded as stored: global, with its explanation.
    assert.equal(await scope.inputValue(), 'global');
    assert.match(await hint.textContent(), /^One limit for the whole shop: .+ one Redis slot\.$/);
    assert.equal(
      await scope.getAttribute('aria-describedby'),
      'policy-seckill-scope-hint policy-seckill-scope-error',
    );
    assert.ok(await scopeError.isHidden());

    // per_item: the explanation follows the choice; the PUT carries only the scope.
    await scope.selectOption('per_item');
    assert.match(await hint.textContent(), /^Each sale counts separately: .+ beside the item.s stock\.$/);
    const put = page.waitForRequest(
      (r) => r.method() === 'PUT' && new URL(r.url()).pathname === '/admin/api/policies/seckill',
    );
    await seckill.getByRole('button', { name: 'Save seckill' }).click();
    assert.deepEqual((await put).postDataJSON(), { rules: [], scope: 'per_item' });
    await waitForText(seckill.getByRole('status'), /^Saved policy seckill\./);
    assert.equal(await scope.inputValue(), 'per_item');
    assert.ok(await seckill.getByRole('alert').isHidden());
    const stored = await apiCall('/admin/api/policies/seckill', { token: ADMIN_TOKEN });
    assert.equal(stored.status, 200);
    assert.equal(stored.data.scope, 'per_item');
    assert.match(await seckill.locator('legend').textContent(), new RegExp(`version ${stored.data.version}$`));
    const audit = page.getByRole('region', { name: 'Rule changes' });
    await audit.getByRole('listitem').filter({ hasText: 'scope global → per_item' }).first().waitFor();

    // A reload shows it as stored.
    await page.reload();
    await page.getByText(`Signed in as ${ADMIN_NAME}`, { exact: true }).waitFor();
    await eventually(async () => assert.equal(await scope.inputValue(), 'per_item'));

    // Back to global (later scenarios expect it), with the user rule at 2 so the
    // limiter's pick-up of this version shows in RateLimit-Policy; then 1 again.
    const threshold = seckill.getByLabel('Threshold of rule user');
    assert.equal(await threshold.inputValue(), '1');
    await scope.selectOption('global');
    await threshold.fill('2');
    await seckill.getByRole('button', { name: 'Save seckill' }).click();
    await waitForText(seckill.getByRole('status'), /^Saved policy seckill\./);
    assert.equal(await scope.inputValue(), 'global');
    assert.equal((await apiCall('/admin/api/policies/seckill', { token: ADMIN_TOKEN })).data.scope, 'global');
    await waitForUserQuota(2, 60);
    await threshold.fill('1');
    await seckill.getByRole('button', { name: 'Save seckill' }).click();
    await waitForText(seckill.getByRole('status'), /^Saved policy seckill\./);
    await waitForUserQuota(1, 60);

    // per_item on a policy whose callers name no item: the server's error shows next to
    // the select, which is marked invalid and focused; nothing is stored.
    const limited = page.locator('form[data-policy="limited"]');
    const limitedScope = limited.getByLabel('Scope', { exact: true });
    const limitedError = page.locator('#policy-limited-scope-error');
    assert.equal(await limitedScope.inputValue(), 'global');
    await limitedScope.selectOption('per_item');
    await limited.getByRole('button', { name: 'Save limited' }).click();
    await waitForText(limited.getByRole('alert'), /^Not saved: the scope was refused/);
    await waitForText(limitedError, /^Policy "limited" cannot be per_item\b/);
    assert.equal(await limitedScope.getAttribute('aria-invalid'), 'true');
    assert.ok(await limitedScope.evaluate((node) => node === document.activeElement));
    assert.ok(await limited.getByRole('status').isHidden());
    assert.equal((await apiCall('/admin/api/policies/limited', { token: ADMIN_TOKEN })).data.scope, 'global');
    await page.screenshot({ path: artifactPath('admin-scope-error.png'), fullPage: true });

    // Choosing global again and saving clears the error (nothing changed to save).
    await limitedScope.selectOption('global');
    await limited.getByRole('button', { name: 'Save limited' }).click();
    await waitForText(limited.getByRole('status'), /^Nothing to save/);
    assert.ok(await limitedError.isHidden());
    assert.equal(await limitedScope.getAttribute('aria-invalid'), null);
    assert.ok(await limited.getByRole('alert').isHidden());

    assert.deepEqual(admin.problems, []);
  });
});

/**
 * A chart line's plotted numbers, by unix second (its `data-values` from the chart's
 * `data-from`), both read from the same drawing (the chart is redrawn every second).
 */
async function plotted(page, chart, series) {
  const [from, values] = await page.locator(`svg[data-chart="${chart}"]`).evaluate((svg, key) => {
    const line = [...svg.querySelectorAll('[data-series]')].find((node) => node.dataset.series === key);
    if (!line) throw new Error(`no line ${key}`);
    return [Number(svg.dataset.from), line.dataset.values.split(',')];
  }, series);
  return values.map((v, i) => [from + i, v === '' ? null : Number(v)]);
}

/** The sum of a chart line's points over seconds `first` to `last`. */
async function plottedSum(page, chart, series, first, last) {
  return (await plotted(page, chart, series))
    .filter(([second]) => second >= first && second <= last)
    .reduce((sum, [, v]) => sum + (v || 0), 0);
}

test('5. a burst of purchases shows in the charts: created summed over the burst = the 200s', async () => {
  const admin = await client(45);
  const page = admin.page;
  await withFailureShots('scenario5', () => ({ admin: page }), async () => {
    await signInAdmin(page);
    const charts = page.getByRole('region', { name: /^Last 5 minutes/ });
    await charts.locator('svg[data-chart="purchases"] [data-series="created"]').waitFor({ state: 'attached' });
    const item = await createItem(`E2E Burst ${RUN}`, { stock: 15, priceCents: 999 });

    // 24 new shoppers (the user rule is 1 a minute now), each from an address of its
    // own, at once: 15 orders, 9 sold out. Then six of the buyers try another item and
    // meet the user rule.
    const buyers = Array.from({ length: 24 }, (_, k) => userId(60 + k));
    const tokens = await Promise.all(buyers.map((user) => shopperToken(user)));
    const burstIp = (k) => `10.79.${Number.parseInt(RUN, 36) % 250}.${k}`;
    const purchase = (k, itemId) =>
      apiCall('/seckill', { method: 'POST', token: tokens[k], ip: burstIp(k), body: { itemId } });
    // An instance flushes what happened since its last flush into the second it flushes
    // in, so an earlier scenario's last purchases can land a second late. Wait for three
    // quiet seconds on every line first: then the burst's seconds hold the burst alone.
    await eventually(
      async () => {
        const now = Math.floor(Date.now() / 1000);
        for (const chart of ['purchases', 'refusals']) {
          const lines = await page
            .locator(`svg[data-chart="${chart}"] [data-series]`)
            .evaluateAll((nodes) => nodes.map((node) => node.dataset.series));
          for (const line of lines) assert.equal(await plottedSum(page, chart, line, now - 4, now), 0, line);
        }
      },
      { timeout: 20_000, interval: 250 },
    );
    const first = Math.floor(Date.now() / 1000);
    const answers = await Promise.all(buyers.map((_, k) => purchase(k, item.id)));
    const created = answers.filter((a) => a.status === 200).length;
    const soldOut = answers.filter((a) => a.status === 409 && a.data.code === 'SOLD_OUT').length;
    assert.equal(created, 15, `statuses: ${answers.map((a) => a.status)}`);
    assert.equal(soldOut, 9);
    const winners = answers.flatMap((a, k) => (a.status === 200 ? [k] : [])).slice(0, 6);
    const refused = await Promise.all(winners.map((k) => purchase(k, items.other.id)));
    assert.deepEqual(refused.map((a) => [a.status, a.data.dimension]), winners.map(() => [429, 'user']));
    const last = Math.floor(Date.now() / 1000) + 2; // a flush lands within a second

    // The chart catches up within a few seconds (it polls every second), and then it
    // shows exactly the burst: nothing more, once every instance has flushed.
    await eventually(
      async () => {
        assert.equal(await plottedSum(page, 'purchases', 'created', first, last), created);
        assert.equal(await plottedSum(page, 'purchases', 'sold_out', first, last), soldOut);
        assert.equal(await plottedSum(page, 'purchases', 'rejected:user', first, last), 6);
        const local = await plottedSum(page, 'refusals', 'refused_locally', first, last);
        const redis = await plottedSum(page, 'refusals', 'refused_by_redis', first, last);
        assert.equal(local + redis, 6);
        const stock = (await plotted(page, 'stock', `item:${item.id}`)).filter(([, v]) => v !== null);
        assert.equal(stock.at(-1)[1], 0, 'the item ends sold out');
      },
      { timeout: 15_000, interval: 250 },
    );
    // The items table counts the burst's orders: all sold, all awaiting payment, sold
    // out (sell-through 100 %), no revenue yet.
    const itemRow = page.locator(`tr[data-item-id="${item.id}"]`);
    await eventually(
      async () => {
        const sold = itemRow.locator('[data-sold]');
        assert.equal(await sold.getAttribute('data-sold'), String(created));
        assert.equal(await sold.getAttribute('data-held'), String(created));
        assert.match(await itemRow.locator('.share-text').textContent(), /^100\s?%$/);
        assert.equal((await itemRow.locator('td[data-label="Revenue (paid)"]').textContent()).trim(), '$0.00');
      },
      { timeout: 10_000, interval: 250 },
    );
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    assert.equal(await plottedSum(page, 'purchases', 'created', first, last), created, 'no late extra');
    assert.equal((await plotted(page, 'purchases', 'created')).length, 300);

    // Screen readers get the same totals in the chart's table.
    const table = charts.getByRole('table', { name: /^Purchases per second by outcome/ });
    assert.match(await table.locator('tr[data-series="created"] td').first().textContent(), /^\d+$/);
    await charts.screenshot({ path: artifactPath('admin-charts-burst.png') });
    assert.deepEqual(admin.problems, []);
  });
});

test('6. screenshots of the shopper page and the admin dashboard, desktop and phone', async () => {
  const shots = [];
  for (const [label, viewport] of [
    ['desktop', { width: 1280, height: 900 }],
    ['phone', { width: 360, height: 780 }],
  ]) {
    const phone = label === 'phone';
    const shopper = await client(40 + shots.length, { viewport, isMobile: phone, hasTouch: phone });
    await signInShopper(shopper.page, userId(2)); // the shopper with three orders
    await shopper.page.getByRole('region', { name: 'My orders' }).getByRole('listitem').nth(2).waitFor();
    await card(shopper.page, items.first.name).getByText('On sale', { exact: true }).waitFor();
    if (!phone) {
      // An outcome on screen: this shopper has met the user rule (now 1 per 60 s).
      await buy(shopper.page, items.other.name, new RegExp(USER_MESSAGE));
    }
    const shopperShot = artifactPath(`shopper-${label}.png`);
    await shopper.page.screenshot({ path: shopperShot, fullPage: true });
    shots.push(shopperShot);

    const admin = await client(50 + shots.length, { viewport, isMobile: phone, hasTouch: phone });
    await signInAdmin(admin.page);
    await admin.page.locator('#item-rows tr').first().waitFor();
    await admin.page.getByRole('region', { name: 'Rule changes' }).getByRole('listitem').first().waitFor();
    await waitForText(admin.page.locator('#orders-total'), /^\d+ orders?$/);
    await admin.page.locator('svg[data-chart="stock"] [data-series]').first().waitFor({ state: 'attached' });
    const adminShot = artifactPath(`admin-${label}.png`);
    await admin.page.screenshot({ path: adminShot, fullPage: true });
    shots.push(adminShot);
    const chartsShot = artifactPath(`admin-charts-${label}.png`);
    await admin.page.getByRole('region', { name: /^Last 5 minutes/ }).screenshot({ path: chartsShot });
    shots.push(chartsShot);

    if (phone) {
      // Nothing wider than the phone: wide tables scroll inside their own box.
      for (const page of [shopper.page, admin.page]) {
        const width = await page.evaluate(() => document.documentElement.scrollWidth);
        assert.ok(width <= 360, `${page.url()} is ${width}px wide on a 360px screen`);
      }
    }
    assert.deepEqual(shopper.problems, []);
    assert.deepEqual(admin.problems, []);
  }
  console.log(`screenshots:\n${shots.map((s) => `  ${s}`).join('\n')}`);
});
