// End-to-end: a finished sale's report (issue 35). Three shoppers buy an item's three
// units through the API (one pays, one cancels), the operator ends the sale, and the
// history of its two minutes (what the fold writes: refusals, errors, the queue) is put
// straight into Postgres; the operator follows the item's Report link from the
// dashboard and reads every figure on the page. Screenshot at 1280×900.
//
//   E2E_BASE_URL=http://127.0.0.1:PORT E2E_ADMIN_TOKEN=… E2E_DATABASE_URL=… node --test report.test.mjs
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  ADMIN_TOKEN,
  RUN,
  apiCall,
  artifactPath,
  launchBrowser,
  newClient,
  shopperToken,
  signInAdmin,
  sql,
  userId,
  waitForText,
  withFailureShots,
} from './helpers.mjs';

let browser;
let client;
let item;

/** An address of this file's shoppers (never connected to, only X-Forwarded-For). */
const ip = (n) => `10.84.${Number.parseInt(RUN, 36) % 250}.${n}`;

before(async () => {
  browser = await launchBrowser();
  // The sale opened at a whole minute, a minute or two ago: its minutes are known.
  const startsAt = new Date(Math.floor(Date.now() / 60_000) * 60_000 - 60_000);
  const created = await apiCall('/admin/api/items', {
    method: 'POST',
    token: ADMIN_TOKEN,
    body: {
      name: `Report ${RUN}`,
      priceCents: 2500,
      stock: 3,
      startsAt: startsAt.toISOString(),
      endsAt: new Date(Date.now() + 3_600_000).toISOString(),
    },
  });
  assert.equal(created.status, 201, JSON.stringify(created.data));
  item = created.data;
  const orders = [];
  for (const n of [85, 86, 87]) {
    const token = await shopperToken(userId(n));
    const bought = await apiCall('/seckill', { method: 'POST', token, ip: ip(n), body: { itemId: item.id } });
    assert.equal(bought.status, 200, JSON.stringify(bought.data));
    orders.push({ token, id: bought.data.orderId, n });
  }
  const [paid, cancelled] = orders;
  assert.equal((await apiCall(`/api/orders/${paid.id}/pay`, { method: 'POST', token: paid.token, ip: ip(85) })).status, 200);
  assert.equal(
    (await apiCall(`/api/orders/${cancelled.id}/cancel`, { method: 'POST', token: cancelled.token, ip: ip(86) })).status,
    200,
  );
  assert.equal((await apiCall(`/admin/api/items/${item.id}/end`, { method: 'POST', token: ADMIN_TOKEN })).status, 200);

  // The orders at known instants: two in the sale's first minute, the last unit 80 s
  // after the start.
  const id = Number(item.id);
  for (const [o, secs] of [
    [orders[0], 5],
    [orders[1], 10],
    [orders[2], 80],
  ]) {
    sql(`UPDATE orders SET created_at = timestamptz '${startsAt.toISOString()}' + interval '${secs} seconds'
         WHERE id = '${o.id}'`);
  }
  // Its two minutes as the fold writes them: refusals by rule, errors, the queue and
  // its waits (admissions by bucket: up to 1 s, 2 s, 5 s, 10 s, 15 s, …).
  const m0 = `timestamptz '${startsAt.toISOString()}'`;
  const m1 = `${m0} + interval '1 minute'`;
  sql(`INSERT INTO history_items (item_id, minute, outcome, count) VALUES
         (${id}, ${m0}, 'rejected:user', 8), (${id}, ${m0}, 'order_failed', 2),
         (${id}, ${m1}, 'rejected:ip', 4), (${id}, ${m1}, 'sold_out', 5)`);
  sql(`INSERT INTO history_rooms (item_id, minute, joins, admissions, abandons, waits) VALUES
         (${id}, ${m0}, 30, 20, 2, '{12,6,2}'), (${id}, ${m1}, 10, 10, 1, '{0,0,0,0,10}')`);
});

after(async () => {
  await client?.context.close();
  await browser?.close();
});

test('R1. the operator opens a finished sale’s report from the items list and reads its figures', async () => {
  client = await newClient(browser, 84);
  const { page, problems } = client;
  await withFailureShots('report', () => ({ page }), async () => {
    await signInAdmin(page);
    const row = page.locator(`tr[data-item-id="${item.id}"]`);
    await row.getByRole('link', { name: `Sale report of item ${item.id} (${item.name})` }).click();
    await page.waitForURL(`**/admin/report.html?item=${item.id}`);
    await waitForText(page.locator('#report-title'), new RegExp(`Sale report: #${item.id} Report ${RUN}`));

    const text = async (id) => ((await page.locator(`#${id}`).textContent()) ?? '').trim();
    await waitForText(page.locator('#report-bought'), /^3$/);
    assert.equal(await text('report-units'), 'of 3 units; 1 left now');
    assert.equal(await text('report-paid'), '1');
    assert.equal(await text('report-cancelled'), '1');
    assert.equal(await text('report-pending'), '1');
    assert.equal(await text('report-expired'), '0');
    assert.equal(await text('report-joined'), '40');
    assert.equal(await text('report-admitted'), '30');
    assert.equal(await text('report-refused'), '12');
    assert.equal(await text('report-refused-detail'), 'ip: 4 · user: 8');
    assert.equal(await text('report-errors'), '2');
    assert.equal(await text('report-peak'), '2 / min');
    assert.equal(await text('report-sold-out'), '1 min 20 s');
    // 30 admitted: the 15th waited over 1 s and up to 2 s; the 29th over 10 s.
    assert.equal(await text('report-wait-median'), '1 s – 2 s');
    assert.equal(await text('report-wait-p95'), '10 s – 15 s');
    // Attempts are the stream's: what the rows above say, and (once the fold has taken
    // them, at its own pace) the three purchases themselves. The page read them before the
    // API is asked here, so it shows the rows' 19 at least and the API's figure at most.
    const shown = Number(await text('report-attempts'));
    const report = await apiCall(`/admin/api/items/${item.id}/report`, { token: ADMIN_TOKEN });
    assert.ok(report.data.attempts >= 19 && report.data.attempts <= 22, JSON.stringify(report.data));
    assert.ok(Number.isInteger(shown) && shown >= 19 && shown <= report.data.attempts, `the page says ${shown}`);

    // The chart: one point a minute from the sale's first, its lines by series.
    const line = (key) => page.locator(`#chart-report path[data-series="${key}"]`).getAttribute('data-values');
    assert.match(await line('rejected:user'), /^8,0(,|$)/);
    assert.match(await line('rejected:ip'), /^0,4(,|$)/);
    assert.match(await line('sold'), /^2,1(,|$)/);
    assert.match(await line('admitted'), /^20,10(,|$)/);
    assert.equal(await page.locator('#offenders-empty').isVisible(), true);
    assert.equal(await page.locator('#wait-rows tr').count(), 4);

    // The exports: the minutes as CSV, the report as JSON.
    const [csv] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export minutes (CSV)' }).click()]);
    assert.equal(csv.suggestedFilename(), `item-${item.id}-report.csv`);
    const [json] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export report (JSON)' }).click()]);
    assert.equal(json.suggestedFilename(), `item-${item.id}-report.json`);
    await waitForText(page.locator('#report-exported'), /Downloaded item-\d+-report\.json/);

    await page.screenshot({ path: artifactPath('report-desktop.png'), fullPage: true, animations: 'disabled' });
    assert.deepEqual(problems, []);
  });
});

test('R2. a report of no item says so in words', async () => {
  const { page, problems } = client;
  await page.goto('/admin/report.html?item=999999999');
  await waitForText(page.locator('#report-error'), /^Could not load the report: .+/);
  assert.equal(await page.locator('#report-body').isHidden(), true);
  await page.goto('/admin/report.html');
  await waitForText(page.locator('#report-error'), /open it from the Report link/);
  assert.deepEqual(problems, []);
});
