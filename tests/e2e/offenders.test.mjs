// End-to-end: the offenders panel. Crafted heavy hitters (rows of history_hitters, as the
// fold writes them, inserted with psql into the run's database) show in the panel with
// their labels and dimensions; blocking an address labelled as shared asks first, and
// going back blocks nothing; blocking it for real lists it under the blocks, Unblock
// lifts it; a user is blocked straight away. Screenshot at 1280×900.
//
//   E2E_BASE_URL=… E2E_ADMIN_TOKEN=… E2E_DATABASE_URL=… node --test offenders.test.mjs
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, before, test } from 'node:test';

import {
  ADMIN_TOKEN,
  RUN,
  apiCall,
  artifactPath,
  launchBrowser,
  newClient,
  signInAdmin,
  userId,
  waitForText,
  withFailureShots,
} from './helpers.mjs';

const DATABASE_URL = process.env.E2E_DATABASE_URL;
/** This run's addresses (documentation ranges), so a rerun meets none of its blocks. */
const octet = Number.parseInt(RUN, 36) % 250;
const SHARED = `198.51.100.${octet}`;
const BURSTY = `203.0.113.${octet}`;
const SCRIPTED = userId(77);

let browser;
let admin;

/** Inserts one instance's sketch entry of the last complete minute. */
function hitter(kind, value, count, others, dimensions) {
  const sql = `INSERT INTO history_hitters (minute, instance, kind, value, item_id, count, error, dimensions, others)
    VALUES (date_trunc('minute', now()) - interval '1 minute', 'e2e-${RUN}', '${kind}', '${value}', 0, ${count}, 0, '${JSON.stringify(dimensions)}', ${others})`;
  execFileSync('psql', [DATABASE_URL, '-q', '-v', 'ON_ERROR_STOP=1', '-c', sql]);
}

before(async () => {
  assert.ok(DATABASE_URL, 'E2E_DATABASE_URL is not set (scripts/e2e.sh sets it)');
  hitter('ip', SHARED, 90, 30, { ip: 90 });
  hitter('ip', BURSTY, 400, 1, { ip: 300, api: 100 });
  hitter('user', String(SCRIPTED), 12, 5, { user: 12 });
  browser = await launchBrowser();
});

after(async () => {
  for (const [kind, value] of [['ip', SHARED], ['ip', BURSTY], ['user', String(SCRIPTED)]]) {
    await apiCall(`/admin/api/blocks/${kind}/${encodeURIComponent(value)}`, { method: 'DELETE', token: ADMIN_TOKEN }).catch(() => {});
  }
  if (admin) await admin.context.close().catch(() => {});
  if (browser) await browser.close();
});

const blocks = async () => (await apiCall('/admin/api/blocks', { token: ADMIN_TOKEN })).data.blocks;

test('the panel shows the offenders, warns before blocking a shared address, and blocks and unblocks', async () => {
  admin = await newClient(browser, 201);
  const { page, problems } = admin;
  await withFailureShots('offenders', () => ({ admin: page }), async () => {
    await signInAdmin(page);
    const addresses = page.locator('#offender-ip-rows');
    const shared = addresses.locator(`tr[data-value="${SHARED}"]`);
    await waitForText(shared, /Shared address/);
    await waitForText(shared, /ip 90/);
    await waitForText(addresses.locator(`tr[data-value="${BURSTY}"]`), /Burst source/);
    const scripted = page.locator(`#offender-user-rows tr[data-value="${SCRIPTED}"]`);
    await waitForText(scripted, /Scripted account/);
    // The panel alone, the sticky bar kept out of it (through the CSSOM: the CSP refuses
    // an injected <style>).
    await page.evaluate(() => document.querySelectorAll('.topbar').forEach((bar) => { bar.style.position = 'static'; }));
    await page.locator('section[aria-labelledby="offenders-title"]').screenshot({ path: artifactPath('admin-offenders.png') });
    await page.evaluate(() => document.querySelectorAll('.topbar').forEach((bar) => { bar.style.position = ''; }));

    // Blocking the shared address asks first; going back blocks nothing.
    await shared.getByRole('button', { name: `Block address ${SHARED}` }).click();
    await page.getByLabel('Reason').fill('e2e: shared');
    await page.locator('#block-submit').click();
    const dialog = page.getByRole('dialog');
    await waitForText(dialog, /honest shoppers/);
    await page.screenshot({ path: artifactPath('admin-offenders-shared-warning.png') });
    await dialog.getByRole('button', { name: 'Go back' }).click();
    assert.deepEqual((await blocks()).filter((b) => b.value === SHARED), []);

    // Blocking it for real: in force, listed; Unblock lifts it.
    await page.locator('#block-submit').click();
    await page.getByRole('dialog').getByRole('button', { name: 'Block everyone behind it' }).click();
    await waitForText(page.locator('#offenders-notice'), new RegExp(`Blocked ${SHARED.replaceAll('.', '\\.')} on every instance`));
    const listed = page.locator(`#block-rows tr[data-value="${SHARED}"]`);
    await waitForText(listed, /e2e: shared/);
    const refused = await apiCall('/api/limited', { ip: SHARED });
    assert.equal(refused.status, 403);
    assert.equal(refused.data.code, 'BLOCKED');
    await listed.getByRole('button', { name: `Unblock ${SHARED}` }).click();
    await waitForText(page.locator('#offenders-notice'), /Unblocked/);
    assert.equal((await apiCall('/api/limited', { ip: SHARED })).status, 200);

    // A scripted account is blocked without a question.
    await scripted.getByRole('button', { name: `Block user ${SCRIPTED}` }).click();
    await page.getByLabel('Reason').fill('e2e: scripted');
    await page.locator('#block-submit').click();
    await waitForText(page.locator(`#block-rows tr[data-value="${SCRIPTED}"]`), /e2e: scripted/);
    assert.equal(await page.getByRole('dialog').count(), 0);
  });
  assert.deepEqual(problems, []);
});
