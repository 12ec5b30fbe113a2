// End-to-end: the odds a waiting place is told (issue 36, item 1), in headless Chromium
// against a running app. A crowd joins through the API ahead of the page's shopper, past
// a small stock: the page shows how far past the stock the place is and what could bring
// a unit back, and never a wait or a promise that stock should last.
//
//   E2E_BASE_URL=http://127.0.0.1:PORT E2E_ADMIN_TOKEN=… node --test odds.test.mjs
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  ADMIN_TOKEN,
  RUN,
  apiCall,
  artifactPath,
  createItem,
  eventually,
  launchBrowser,
  newClient,
  shopperToken,
  userId,
  waitForText,
  withFailureShots,
} from './helpers.mjs';

/** What the page waits between two checks of a place (the server's refreshIntervalSeconds). */
const REFRESH_MS = 6_000;
const PAST_STOCK = /^You are 3 places past the 2 units still free\. A unit comes back if a pass runs out or an order goes unpaid\.$/;
/** Words that promise a unit or a time: none may be shown to a place past the stock. */
const PROMISES = /should still be stock|Estimated wait|About \d|Any moment now|\blikely\b/i;

let browser;
let client;

before(async () => {
  browser = await launchBrowser();
});

after(async () => {
  if (client) await client.context.close().catch(() => {});
  if (browser) await browser.close();
});

/** A shopper driven through the API, with an address of their own. */
async function apiShopper(n, itemId) {
  const ip = `10.82.${Number.parseInt(RUN, 36) % 250}.${n}`;
  const token = await shopperToken(userId(n));
  let ticket = null;
  return {
    async join() {
      const res = await apiCall(`/api/items/${itemId}/queue`, { method: 'POST', token, ip });
      assert.equal(res.status, 200, `join: ${JSON.stringify(res.data)}`);
      ticket = res.data.ticket;
      return res.data;
    },
    poll: () => apiCall(`/api/items/${itemId}/queue`, { token, ip, headers: { 'Queue-Ticket': ticket } }),
  };
}

test('O1. a shopper past the stock is told how far past it, and what could bring a unit back, never a wait', async () => {
  client = await newClient(browser, 70);
  const page = client.page;
  await withFailureShots('odds1', () => ({ shopper: page }), async () => {
    // 3 units, one live pass at most: the first joiner is admitted and holds a unit, the
    // next four wait behind its pass, and the page's shopper joins sixth: rank 5 among the
    // places waiting, 2 units free, 3 places past them.
    const item = await createItem(`E2E Odds Kettle ${RUN}`, { stock: 3, priceCents: 4900 });
    const room = await apiCall(`/admin/api/items/${item.id}/waiting-room`, {
      method: 'PUT',
      token: ADMIN_TOKEN,
      body: { enabled: true, order: 'fifo', admitPerSecond: 100, maxActive: 1, passTtlSecs: 120, abandonAfterSecs: 60 },
    });
    assert.equal(room.status, 200, JSON.stringify(room.data));
    const crowd = [];
    for (let n = 1; n <= 5; n += 1) crowd.push(await apiShopper(n, item.id));
    for (const s of crowd) await s.join();
    await eventually(
      async () => {
        const res = await crowd[0].poll();
        assert.equal(res.data.state, 'admitted', JSON.stringify(res.data));
      },
      { interval: 200 },
    );
    // The API's figures for the crowd, once the copy has the pass: the two places the
    // free units reach are told likely, the next two are past them.
    await eventually(
      async () => {
        const answers = await Promise.all(crowd.slice(1).map(async (s) => (await s.poll()).data));
        assert.deepEqual(
          answers.map((a) => [a.position, a.likely, a.unitsFree, a.pastStock]),
          [
            [2, true, 2, null],
            [3, true, 2, null],
            [4, false, 2, 1],
            [5, false, 2, 2],
          ],
        );
        for (const a of answers.slice(2)) assert.equal('waitSeconds' in a, false, JSON.stringify(a));
      },
      { interval: 200 },
    );

    await page.clock.install();
    await page.goto('/');
    await page.getByLabel('User id').fill(String(userId(20)));
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByText(`Signed in as user ${userId(20)}`, { exact: true }).waitFor();
    const card = page
      .locator('li.item-card')
      .filter({ has: page.getByRole('heading', { name: item.name, exact: true }) });
    const joined = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === `/api/items/${item.id}/queue`);
    await card.getByRole('button', { name: 'Join the queue' }).click();
    const answer = await (await joined).json();
    assert.deepEqual(
      [answer.position, answer.ahead, answer.likely, answer.unitsFree, answer.pastStock, 'waitSeconds' in answer],
      [6, 4, false, 2, 3, false],
      'the join is told the odds too',
    );
    const queue = card.getByRole('region', { name: `Queue for ${item.name}` });
    await waitForText(queue.getByRole('status'), /^You are in the queue\./);
    await waitForText(queue.locator('.queue-place'), /^6$/);
    await waitForText(queue.locator('.queue-detail'), PAST_STOCK);
    assert.equal(await queue.locator('.queue-wait-row').isHidden(), true, 'no wait past the stock');
    assert.doesNotMatch(await queue.innerText(), PROMISES);

    // The next check says the same, and the page still promises nothing. (Moved on by
    // the clock, a check can come before this instance's copy has seen the join, which
    // it does within a second: then it names no place and promises nothing either.)
    const deadline = Date.now() + 10_000;
    let polled;
    for (;;) {
      const checked = page.waitForResponse((r) => r.request().method() === 'GET' && new URL(r.url()).pathname === `/api/items/${item.id}/queue`);
      await page.clock.fastForward(REFRESH_MS);
      await page.clock.setSystemTime(Date.now());
      polled = await (await checked).json();
      if (Number.isInteger(polled.position)) break;
      assert.equal(polled.likely, null, JSON.stringify(polled));
      assert.ok(Date.now() < deadline, 'the copy has the join within 10 s');
      await new Promise((resolve) => setTimeout(resolve, 300));
    }
    assert.deepEqual([polled.state, polled.likely, polled.pastStock, 'waitSeconds' in polled], ['waiting', false, 3, false]);
    await waitForText(queue.locator('.queue-checked'), /^Checked at /);
    await waitForText(queue.locator('.queue-detail'), PAST_STOCK);
    assert.equal(await queue.locator('.queue-wait-row').isHidden(), true);
    assert.doesNotMatch(await queue.innerText(), PROMISES);

    for (const width of [1280, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await card.evaluate((node) => node.scrollIntoView({ block: 'start' }));
      await page.screenshot({ path: artifactPath(`queue-past-stock-${width}.png`), animations: 'disabled' });
      const wide = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(wide <= width, `the page is ${wide}px wide on a ${width}px screen`);
    }
    assert.deepEqual(client.problems, []);
  });
});
