// End-to-end: the edge domains' panel. An operator writes a new domain's document as
// JSON and saves it (listed at version 1); a document with a typo is refused, naming
// the field; someone else changes the domain meanwhile and the operator's save is
// refused (409), naming the version now; loaded again from the list, the domain is
// deleted after a confirmation. A screenshot at 1280×900.
//
//   E2E_BASE_URL=http://127.0.0.1:PORT E2E_ADMIN_TOKEN=… node --test domains.test.mjs
//
// The run's domain is deleted at the end, whatever happened.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  ADMIN_TOKEN,
  RUN,
  apiCall,
  artifactPath,
  launchBrowser,
  newClient,
  signInAdmin,
  waitForText,
  withFailureShots,
} from './helpers.mjs';

const DOMAIN = `e2e_${RUN}`;
const domainPath = `/admin/api/rls/domains/${DOMAIN}`;
const documentOf = (requests, unit = 'second') => ({
  domain: DOMAIN,
  descriptors: [{ key: 'remote_address', rate_limit: { unit, requests_per_unit: requests } }],
});

let browser;
let admin;

before(async () => {
  browser = await launchBrowser();
});

after(async () => {
  await apiCall(domainPath, { method: 'DELETE', token: ADMIN_TOKEN }).catch(() => {});
  if (admin) await admin.context.close().catch(() => {});
  if (browser) await browser.close();
});

test('D1. a domain is created as JSON, refused with its field, refused after someone else changed it, and deleted', async () => {
  admin = await newClient(browser, 71, { viewport: { width: 1280, height: 900 } });
  const { page, problems } = admin;
  await withFailureShots('domains', () => ({ admin: page }), async () => {
    await signInAdmin(page);
    const panel = page.getByRole('region', { name: /^Edge domains/ });
    const result = page.locator('#domain-result');

    await panel.getByLabel('Domain', { exact: true }).fill(DOMAIN);
    const text = panel.getByLabel(/^Document/);
    await text.fill(JSON.stringify(documentOf(5, 'fortnight')));
    await panel.getByRole('button', { name: 'Save domain' }).click();
    await waitForText(result, /^Not saved: .*\(descriptors\[0\]\.rate_limit\.unit\)$/);

    await text.fill(JSON.stringify(documentOf(5)));
    await panel.getByRole('button', { name: 'Save domain' }).click();
    await waitForText(result, new RegExp(`^Saved domain ${DOMAIN} \\(version 1\\)`));
    await waitForText(panel.locator('#domains-list'), new RegExp(`${DOMAIN} version 1`));
    await panel.screenshot({ path: artifactPath('domains-desktop.png'), animations: 'disabled' });

    // Someone else saves version 2; this page's save, made from version 1, is refused.
    const elsewhere = await apiCall(domainPath, { method: 'PUT', token: ADMIN_TOKEN, body: documentOf(9), headers: { 'If-Match': '"1"' } });
    assert.equal(elsewhere.status, 200, JSON.stringify(elsewhere.data));
    await text.fill(JSON.stringify(documentOf(6)));
    await panel.getByRole('button', { name: 'Save domain' }).click();
    await waitForText(result, /someone else changed this domain since you loaded it \(now version 2\)/);
    const stored = await apiCall(domainPath, { token: ADMIN_TOKEN });
    assert.equal(stored.data.descriptors[0].rate_limit.requests_per_unit, 9);

    // Loaded again from the list: their version, then deleted after a confirmation.
    await panel.locator('#domains-list').getByRole('button', { name: DOMAIN, exact: true }).click();
    await waitForText(panel.locator('#domain-version'), /^version 2$/);
    assert.deepEqual(JSON.parse(await text.inputValue()), documentOf(9));
    await panel.getByRole('button', { name: 'Delete domain' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete domain' }).click();
    await waitForText(result, new RegExp(`^Deleted domain ${DOMAIN}\\.$`));
    assert.equal((await apiCall(domainPath, { token: ADMIN_TOKEN })).status, 404);
    assert.deepEqual(problems, []);
  });
});
