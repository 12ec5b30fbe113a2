// End-to-end: the rules editor's algorithms and shadow rules. An operator adds a shadow
// rule to the sale's policy (first with a threshold of 0, and, on /api/limited, with a
// key source its callers cannot give: each refusal shows next to its field), sees it
// marked in the list and, dashed, in the purchases chart once purchases pass that it
// would have refused; switches the algorithm to GCRA and back; and removes the rule
// after a confirmation. The audit list says what was added and what was removed.
// Screenshots at 1280×900 and 390×844.
//
//   E2E_BASE_URL=http://127.0.0.1:PORT E2E_ADMIN_TOKEN=… node --test policies.test.mjs
//
// The seckill policy is left as it was found: no extra rule, its algorithm back.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import {
  ADMIN_NAME,
  ADMIN_TOKEN,
  RUN,
  apiCall,
  artifactPath,
  createItem,
  eventually,
  launchBrowser,
  newClient,
  shopperToken,
  signInAdmin,
  userId,
  waitForText,
  withFailureShots,
} from './helpers.mjs';

const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };
const RULE = `try_${RUN}`;
const ALGORITHMS = ['sliding_window', 'token_bucket', 'fixed_window', 'sliding_window_counter', 'gcra', 'leaky_bucket'];

let browser;
let admin;
/** The seckill policy's algorithm as found, put back at the end. */
let algorithmBefore = 'sliding_window';

const seckillPolicy = () => apiCall('/admin/api/policies/seckill', { token: ADMIN_TOKEN });
const putSeckill = (body) => apiCall('/admin/api/policies/seckill', { method: 'PUT', token: ADMIN_TOKEN, body });

before(async () => {
  browser = await launchBrowser();
  const stored = await seckillPolicy();
  assert.equal(stored.status, 200, JSON.stringify(stored.data));
  algorithmBefore = stored.data.algorithm;
});

after(async () => {
  // A failed run must not leave its rule or algorithm to the next file.
  const stored = await seckillPolicy().catch(() => null);
  if (stored?.status === 200) {
    const body = { rules: [] };
    if (stored.data.rules.some((r) => r.name === RULE)) body.rules.push({ name: RULE, remove: true });
    if (stored.data.algorithm !== algorithmBefore) body.algorithm = algorithmBefore;
    if (body.rules.length || body.algorithm) await putSeckill(body);
  }
  if (admin) await admin.context.close().catch(() => {});
  if (browser) await browser.close();
});

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

/** Waits until the audit list has `line` in a change of seckill made by this run's admin. */
async function auditSays(page, line) {
  const entry = page
    .getByRole('region', { name: 'Rule changes' })
    .locator('li.audit-entry')
    .filter({ has: page.getByText(line, { exact: true }) });
  await entry.waitFor();
  assert.match(await entry.locator('.audit-head').textContent(), new RegExp(`^seckill changed by ${ADMIN_NAME} · `));
}

/** The body of the PUT of the seckill policy that `action` makes. */
async function putFrom(page, action) {
  const request = page.waitForRequest(
    (r) => r.method() === 'PUT' && new URL(r.url()).pathname === '/admin/api/policies/seckill',
  );
  await action();
  return (await request).postDataJSON();
}

test('P1. a shadow rule is added (after a refused threshold and key), marked, charted dashed, survives GCRA and back, and is removed after a confirmation', async () => {
  admin = await newClient(browser, 70, { viewport: DESKTOP });
  const { page, problems } = admin;
  await withFailureShots('policies', () => ({ admin: page }), async () => {
    await signInAdmin(page);

    const card = page.locator('[data-policy-card="seckill"]');
    const policy = card.locator('form[data-policy="seckill"]');
    const algorithm = policy.getByLabel('Algorithm', { exact: true });
    await eventually(async () => assert.equal(await algorithm.inputValue(), algorithmBefore));
    assert.deepEqual(await algorithm.locator('option').evaluateAll((os) => os.map((o) => o.value)), ALGORITHMS);
    assert.ok(await policy.getByLabel('When Redis is down').isVisible());

    // The add-rule form: a threshold of 0 is the server's to refuse, next to the field.
    await card.getByText('Add a rule to seckill', { exact: true }).click();
    const add = card.locator('form[data-add-rule="seckill"]');
    await add.getByLabel('Name', { exact: true }).fill(RULE);
    await add.getByLabel('Counted per').selectOption('ip');
    await add.getByLabel('Window (ms)').fill('60000');
    await add.getByLabel('Threshold').fill('0');
    await add.getByLabel('Message when refused').fill('Would be too many from one address');
    assert.ok(await add.getByLabel(/^Shadow rule/).isChecked(), 'a new rule starts as a shadow rule');
    const refusedBody = await putFrom(page, () => add.getByRole('button', { name: 'Add rule to seckill' }).click());
    assert.deepEqual(refusedBody, {
      rules: [{ name: RULE, key: 'ip', windowMs: 60000, threshold: 0, message: 'Would be too many from one address', shadow: true }],
    });
    const threshold = add.getByLabel('Threshold');
    await waitForText(add.getByRole('alert'), /^Not added: .*threshold/i);
    await waitForText(page.locator('#policy-seckill-Add-threshold-error'), /threshold/i);
    assert.equal(await threshold.getAttribute('aria-invalid'), 'true');
    assert.ok(await threshold.evaluate((node) => node === document.activeElement));
    assert.equal(await policy.locator(`tr[data-rule="${RULE}"]`).count(), 0);
    await withBarAtTop(page, () => add.screenshot({ path: artifactPath('policies-field-error-desktop.png'), animations: 'disabled' }));

    // A key source the policy's callers cannot give (/api/limited is open to anyone):
    // refused as `rules[0].key`, said next to "Counted per".
    const limited = page.locator('[data-policy-card="limited"]');
    await limited.getByText('Add a rule to limited', { exact: true }).click();
    const addLimited = limited.locator('form[data-add-rule="limited"]');
    await addLimited.getByLabel('Name', { exact: true }).fill(RULE);
    await addLimited.getByLabel('Counted per').selectOption('user');
    await addLimited.getByLabel('Threshold').fill('5');
    await addLimited.getByLabel('Message when refused').fill('Slow down');
    await addLimited.getByRole('button', { name: 'Add rule to limited' }).click();
    await waitForText(page.locator('#policy-limited-Add-key-error'), /user/);
    assert.equal(await addLimited.getByLabel('Counted per').getAttribute('aria-invalid'), 'true');
    await waitForText(addLimited.getByRole('alert'), /^Not added: /);
    await limited.getByText('Add a rule to limited', { exact: true }).click(); // closed again

    await threshold.fill('2');
    await add.getByRole('button', { name: 'Add rule to seckill' }).click();
    await waitForText(add.getByRole('status'), new RegExp(`^Added shadow rule ${RULE} to policy seckill\\.`));
    assert.equal(await threshold.getAttribute('aria-invalid'), null);
    const row = policy.locator(`tr[data-rule="${RULE}"]`);
    await waitForText(row.locator('th .badge'), /^shadow$/);
    assert.ok(await row.getByLabel(`Rule ${RULE} is a shadow rule`).isChecked());
    assert.ok((await row.textContent()).includes('2 per 60 s'));
    const stored = await seckillPolicy();
    const rule = stored.data.rules.find((r) => r.name === RULE);
    assert.deepEqual([rule.shadow, rule.key, rule.threshold], [true, 'ip', 2]);
    assert.match(await policy.locator('legend').textContent(), new RegExp(`version ${stored.data.version}$`));
    await auditSays(page, `${RULE}: added as a shadow rule, key ip, threshold 2, window 60000 ms, message “Would be too many from one address”`);

    // Three shoppers from one address: the shadow rule (2 a minute per address) would
    // have refused the third; it refuses nothing, and the chart shows it dashed.
    const item = await createItem(`E2E Shadow ${RUN}`, { stock: 10 });
    const ip = `10.83.${Number.parseInt(RUN, 36) % 250}.1`;
    await eventually(async () => {
      // The limiter picks the new rule up within a second.
      const installed = await apiCall('/admin/api/stats/series?window=5', { token: ADMIN_TOKEN });
      assert.ok(Object.hasOwn(installed.data.purchases.shadowRefused || {}, RULE), 'no shadow series yet');
    });
    for (const n of [11, 12, 13]) {
      const bought = await apiCall('/seckill', { method: 'POST', token: await shopperToken(userId(n)), ip, body: { itemId: item.id } });
      assert.equal(bought.status, 200, JSON.stringify(bought.data));
    }
    const line = page.locator(`svg[data-chart="purchases"] [data-series="shadow:${RULE}"]`);
    await eventually(async () => {
      assert.match(await line.getAttribute('class'), /\bchart-line-dashed\b/);
      const total = (await line.getAttribute('data-values')).split(',').reduce((sum, v) => sum + Number(v || 0), 0);
      assert.equal(total, 1);
    });
    const legend = page.locator('#chart-purchases .chart-legend li').filter({ hasText: `Would refuse: ${RULE}` });
    assert.equal(await legend.locator('.swatch-dashed').count(), 1);

    // GCRA, then back: each save sends the algorithm alone; the rule stays a shadow one.
    const hint = page.locator('#policy-seckill-algorithm-hint');
    for (const [choice, words] of [['gcra', /one timestamp a key/], [algorithmBefore, /./]]) {
      await algorithm.selectOption(choice);
      await waitForText(hint, words);
      const body = await putFrom(page, () => policy.getByRole('button', { name: 'Save seckill' }).click());
      assert.deepEqual(body, { rules: [], algorithm: choice });
      await waitForText(policy.getByRole('status'), /^Saved policy seckill\./);
      assert.equal((await seckillPolicy()).data.algorithm, choice);
      await waitForText(row.locator('th .badge'), /^shadow$/);
    }
    // The leaky bucket's max delay shows only while it is chosen.
    const maxDelay = row.getByLabel(`Max delay (ms) of rule ${RULE}`);
    assert.ok(await maxDelay.isHidden());
    await algorithm.selectOption('leaky_bucket');
    assert.ok(await maxDelay.isVisible());
    await algorithm.selectOption(algorithmBefore);
    assert.ok(await maxDelay.isHidden());

    for (const [label, viewport] of [['desktop', DESKTOP], ['phone', PHONE]]) {
      await page.setViewportSize(viewport);
      await withBarAtTop(page, async () => {
        await card.screenshot({ path: artifactPath(`policies-shadow-rule-${label}.png`), animations: 'disabled' });
        await page.locator('#chart-purchases').screenshot({ path: artifactPath(`policies-chart-${label}.png`) });
      });
      const width = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(width <= viewport.width, `the page is ${width}px wide on a ${viewport.width}px screen`);
    }
    await page.setViewportSize(DESKTOP);

    // Remove: "Go back" keeps it. Someone else changes the rule meanwhile: the removal
    // is refused and the form shows their version; confirmed again, only the removal is
    // sent and the row goes.
    const remove = row.getByRole('button', { name: `Remove rule ${RULE}` });
    await remove.click();
    await page.getByRole('dialog').getByRole('button', { name: 'Go back' }).click();
    assert.equal(await row.count(), 1);
    const elsewhere = await putSeckill({ rules: [{ name: RULE, threshold: 3 }] });
    assert.equal(elsewhere.status, 200, JSON.stringify(elsewhere.data));
    await remove.click();
    await page.getByRole('dialog').getByRole('button', { name: 'Remove the rule' }).click();
    await waitForText(
      policy.getByRole('alert'),
      new RegExp(`^Rule ${RULE} not removed: someone else changed policy seckill since you loaded it \\(now version ${elsewhere.data.version}\\)`),
    );
    assert.equal(await row.getByLabel(`Threshold of rule ${RULE}`).inputValue(), '3');
    await remove.click();
    const removal = await putFrom(page, () => page.getByRole('dialog').getByRole('button', { name: 'Remove the rule' }).click());
    assert.deepEqual(removal, { rules: [{ name: RULE, remove: true }] });
    await waitForText(policy.getByRole('status'), new RegExp(`^Removed rule ${RULE} from policy seckill\\.`));
    assert.equal(await row.count(), 0);
    assert.ok(await policy.getByRole('alert').isHidden());
    const left = await seckillPolicy();
    assert.equal(left.data.rules.some((r) => r.name === RULE), false);
    assert.equal(left.data.algorithm, algorithmBefore);
    assert.match(await policy.locator('legend').textContent(), new RegExp(`version ${left.data.version}$`));
    await auditSays(page, `${RULE}: removed (a shadow rule)`);

    assert.deepEqual(problems, []);
  });
});
