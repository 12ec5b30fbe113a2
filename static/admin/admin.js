// The admin dashboard: live counters and their charts, items (create, pause, resume),
// orders, the rate-limit rules editor and its audit trail. The token lives in
// sessionStorage only.
import {
  announce,
  api,
  dateToLocalInput,
  el,
  formatDateTime,
  formatPrice,
  formatTime,
  formatWait,
  localInputToIso,
  poll,
  retryAfterMs,
} from '../common.js';
import { renderLineChart } from './charts.js';

const TOKEN_KEY = 'seckill.admin.token';
const STATS_EVERY_MS = 2000;
const STATS_WINDOW_S = 60;
const SERIES_EVERY_MS = 1000;
const SERIES_WINDOW_S = 300;
const DIMENSIONS = ['api', 'user', 'ip'];

const $ = (id) => document.getElementById(id);
const ui = {
  nav: $('admin-nav'),
  account: $('account'),
  signedInAs: $('signed-in-as'),
  signOut: $('sign-out'),
  signInPanel: $('sign-in-panel'),
  signInForm: $('sign-in-form'),
  signInButton: $('sign-in-button'),
  tokenInput: $('admin-token'),
  signInError: $('sign-in-error'),
  dashboard: $('dashboard'),
  notice: $('notice'),
  // stats
  statsUpdated: $('stats-updated'),
  statsError: $('stats-error'),
  statOrders: $('stat-orders'),
  statPasses: $('stat-passes'),
  statRejections: $('stat-rejections'),
  statFailOpen: $('stat-fail-open'),
  dimensionRows: $('dimension-rows'),
  chartsUpdated: $('charts-updated'),
  chartsError: $('charts-error'),
  chartPurchases: $('chart-purchases'),
  chartStock: $('chart-stock'),
  chartRefusals: $('chart-refusals'),
  itemRows: $('item-rows'),
  itemsEmpty: $('items-empty'),
  // create
  createForm: $('create-form'),
  createButton: $('create-button'),
  createResult: $('create-result'),
  tzHint: $('tz-hint'),
  // orders
  ordersForm: $('orders-form'),
  ordersClear: $('orders-clear'),
  ordersError: $('orders-error'),
  orderRows: $('order-rows'),
  ordersEmpty: $('orders-empty'),
  ordersTotal: $('orders-total'),
  ordersPrev: $('orders-prev'),
  ordersNext: $('orders-next'),
  ordersPage: $('orders-page'),
  // rules
  rulesError: $('rules-error'),
  policies: $('policies'),
  // audit
  auditPolicy: $('audit-policy'),
  auditRefresh: $('audit-refresh'),
  auditList: $('audit-list'),
  auditEmpty: $('audit-empty'),
  auditError: $('audit-error'),
};

let token = sessionStorage.getItem(TOKEN_KEY);
let stopStats = null;
let stopSeries = null;

/** Admin API call with the token; a 401 ends the session. */
async function adminApi(path, options = {}) {
  const result = await api(path, { ...options, token });
  if (result.status === 401 && token) {
    signedOut('Your admin session is no longer valid. Please sign in again.');
  }
  return result;
}

// --- sign-in ------------------------------------------------------------------------

function showSignedIn(name) {
  ui.signInPanel.hidden = true;
  ui.dashboard.hidden = false;
  ui.nav.hidden = false;
  ui.account.hidden = false;
  ui.signedInAs.textContent = `Signed in as ${name}`;
  if (stopStats) stopStats();
  stopStats = poll(loadStats, STATS_EVERY_MS);
  if (stopSeries) stopSeries();
  stopSeries = poll(loadSeries, SERIES_EVERY_MS);
  loadOrders(1);
  loadPolicies();
  loadAudit();
}

function signedOut(message) {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  if (stopStats) stopStats();
  stopStats = null;
  if (stopSeries) stopSeries();
  stopSeries = null;
  ui.dashboard.hidden = true;
  ui.nav.hidden = true;
  ui.account.hidden = true;
  ui.signInPanel.hidden = false;
  ui.tokenInput.value = '';
  announce(ui.signInError, message || '', 'info');
  ui.tokenInput.focus();
}

async function checkToken(candidate) {
  const result = await api('/admin/api/me', { token: candidate });
  if (result.ok) return { name: result.data.name };
  if (result.error.code === 'RATE_LIMITED') {
    const wait = retryAfterMs(result);
    const when = wait === null ? '' : ` You can try again in ${formatWait(wait)}.`;
    return { error: `${sentence(result.error.message)}${when}` };
  }
  if (result.error.code === 'UNAUTHENTICATED') {
    return { error: 'That token was not accepted. Check it and try again.' };
  }
  return { error: result.error.message };
}

ui.signInForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  announce(ui.signInError, '');
  ui.tokenInput.removeAttribute('aria-invalid');
  const candidate = ui.tokenInput.value.trim();
  if (!candidate) {
    ui.tokenInput.setAttribute('aria-invalid', 'true');
    announce(ui.signInError, 'Enter the admin token.', 'error');
    ui.tokenInput.focus();
    return;
  }
  ui.signInButton.disabled = true;
  const outcome = await checkToken(candidate);
  ui.signInButton.disabled = false;
  if (outcome.error) {
    ui.tokenInput.setAttribute('aria-invalid', 'true');
    announce(ui.signInError, outcome.error, 'error');
    return;
  }
  token = candidate;
  sessionStorage.setItem(TOKEN_KEY, token);
  ui.tokenInput.value = '';
  showSignedIn(outcome.name);
});

ui.signOut.addEventListener('click', () => signedOut('You are signed out.'));

function sentence(text) {
  const t = String(text).trim();
  return t.charAt(0).toUpperCase() + t.slice(1).replace(/[.!\s]*$/, '.');
}

// --- live stats and items -------------------------------------------------------------

const numberFormat = new Intl.NumberFormat();
const fmt = (n) => numberFormat.format(Number(n) || 0);

/** id → {tr, …cells} of the items table. */
const itemRows = new Map();
/** Items with a pause/resume request on the wire. */
const toggling = new Set();

function dimensionRow(dimension, passes, rejections) {
  const total = passes + rejections;
  const share = total > 0 ? Math.round((rejections / total) * 100) : 0;
  const meter = el('meter', { min: 0, max: 100, value: share, class: 'share', 'aria-hidden': 'true' });
  return el(
    'tr',
    { dataset: { dimension } },
    el('th', { scope: 'row', text: dimension }),
    el('td', { class: 'num', text: fmt(passes) }),
    el('td', { class: 'num', text: fmt(rejections) }),
    el('td', { class: 'bar-col' }, meter, el('span', { class: 'share-text', text: `${share}%` })),
  );
}

async function loadStats() {
  if (!token) return;
  const result = await adminApi(`/admin/api/stats?window=${STATS_WINDOW_S}`);
  if (!token) return;
  if (!result.ok) {
    announce(ui.statsError, `Could not load the live counters: ${result.error.message}`, 'error');
    return;
  }
  announce(ui.statsError, '');
  const s = result.data;
  const passes = s.passes || {};
  const rejections = s.rejections || {};
  const dims = [...new Set([...DIMENSIONS, ...Object.keys(passes), ...Object.keys(rejections)])];
  const sum = (o) => Object.values(o).reduce((a, b) => a + (Number(b) || 0), 0);
  ui.statOrders.textContent = fmt(s.orders);
  ui.statPasses.textContent = fmt(sum(passes));
  ui.statRejections.textContent = fmt(sum(rejections));
  ui.statFailOpen.textContent = fmt(s.failOpen);
  ui.statFailOpen.classList.toggle('alarm', Number(s.failOpen) > 0);
  ui.dimensionRows.replaceChildren(
    ...dims.map((d) => dimensionRow(d, Number(passes[d]) || 0, Number(rejections[d]) || 0)),
  );
  orderStates = s.ordersByState || {};
  renderItems(Array.isArray(s.items) ? s.items : []);
  ui.statsUpdated.textContent = `Updated ${formatTime(new Date())}`;
}

// --- charts -----------------------------------------------------------------------------

const points = (values) => (Array.isArray(values) ? values.map((v) => (v === null ? null : Number(v) || 0)) : []);

async function loadSeries() {
  if (!token) return;
  const result = await adminApi(`/admin/api/stats/series?window=${SERIES_WINDOW_S}`);
  if (!token) return;
  if (!result.ok) {
    announce(ui.chartsError, `Could not load the charts: ${result.error.message}`, 'error');
    return;
  }
  announce(ui.chartsError, '');
  const s = result.data;
  const p = s.purchases || {};
  const rejected = p.rejected || {};
  renderLineChart(ui.chartPurchases, {
    name: 'purchases',
    title: 'Purchases per second by outcome, last 5 minutes (totals)',
    from: s.from,
    lines: [
      { key: 'created', label: 'Created', values: points(p.created), tone: 'created' },
      { key: 'sold_out', label: 'Sold out', values: points(p.soldOut), tone: 'sold-out' },
      ...Object.keys(rejected).map((d) => ({ key: `rejected:${d}`, label: `Rejected: ${d}`, values: points(rejected[d]) })),
      { key: 'errors', label: 'Errors', values: points(p.errors), tone: 'errors' },
      { key: 'other', label: 'Other', values: points(p.other), tone: 'other' },
    ],
  });
  const stock = s.stock || {};
  renderLineChart(ui.chartStock, {
    name: 'stock',
    kind: 'level',
    title: 'Stock remaining per item (latest)',
    from: s.from,
    lines: Object.keys(stock).map((id) => {
      const row = itemRows.get(Number(id));
      return { key: `item:${id}`, label: row ? `#${id} ${row.item.name}` : `Item #${id}`, values: points(stock[id]) };
    }),
  });
  const r = s.refusals || {};
  renderLineChart(ui.chartRefusals, {
    name: 'refusals',
    title: 'Limiter refusals per second, last 5 minutes (totals)',
    from: s.from,
    lines: [
      { key: 'refused_locally', label: 'Answered locally', values: points(r.local), tone: 'local' },
      { key: 'refused_by_redis', label: 'Answered by Redis', values: points(r.redis), tone: 'redis' },
    ],
  });
  ui.chartsUpdated.textContent = `Updated ${formatTime(new Date())}`;
}

function statusOf(item, now = Date.now()) {
  if (Date.parse(item.endsAt) <= now) return ['Ended', 'badge-ended'];
  if (item.paused) return ['Paused', 'badge-paused'];
  if (Date.parse(item.startsAt) > now) return ['Upcoming', 'badge-upcoming'];
  if (Number(item.remainingStock) <= 0) return ['Sold out', 'badge-sold-out'];
  return ['On sale', 'badge-open'];
}

/** item id → state → orders, from the last stats answer. */
let orderStates = {};
const ORDER_STATES = [
  ['pending_payment', 'awaiting payment'],
  ['paid', 'paid'],
  ['cancelled', 'cancelled'],
  ['expired', 'expired'],
];

function createItemRow(item) {
  const r = {};
  r.orders = el('td', { class: 'small orders-cell', 'data-label': 'Orders' });
  r.id = el('td', { class: 'num', 'data-label': 'ID' });
  r.name = el('td', { class: 'name-cell', 'data-label': 'Name' });
  r.price = el('td', { class: 'num', 'data-label': 'Price' });
  r.stock = el('td', { class: 'num', 'data-label': 'Stock' });
  r.window = el('td', { class: 'small window-cell', 'data-label': 'Sale window' });
  r.badge = el('span', { class: 'badge' });
  r.toggle = el('button', { type: 'button', class: 'button button-small', onclick: () => togglePause(item.id) });
  r.tr = el(
    'tr',
    { dataset: { itemId: String(item.id) } },
    r.id,
    r.name,
    r.price,
    r.stock,
    r.orders,
    r.window,
    el('td', { 'data-label': 'Status' }, r.badge),
    el('td', { class: 'action' }, r.toggle),
  );
  return r;
}

function renderItemRow(item) {
  let r = itemRows.get(item.id);
  if (!r) {
    r = createItemRow(item);
    itemRows.set(item.id, r);
  }
  r.item = item;
  r.id.textContent = String(item.id);
  r.name.textContent = item.name;
  r.price.textContent = formatPrice(item.priceCents);
  r.stock.textContent = `${fmt(item.remainingStock)} / ${fmt(item.totalStock)}`;
  const states = orderStates[item.id] || {};
  r.orders.replaceChildren(
    ...ORDER_STATES.map(([state, label]) =>
      el('span', { class: `state-count state-${state}`, dataset: { state, count: String(states[state] || 0) } },
        `${fmt(states[state] || 0)} ${label}`),
    ),
  );
  r.window.textContent = `${formatDateTime(item.startsAt)} – ${formatDateTime(item.endsAt)}`;
  const [label, cls] = statusOf(item);
  r.badge.textContent = label;
  r.badge.className = `badge ${cls}`;
  const busy = toggling.has(item.id);
  r.toggle.textContent = item.paused ? 'Resume' : 'Pause';
  r.toggle.setAttribute('aria-label', `${item.paused ? 'Resume' : 'Pause'} item ${item.id} (${item.name})`);
  r.toggle.disabled = busy;
  r.toggle.classList.toggle('button-primary', item.paused);
  return r;
}

function renderItems(list) {
  const seen = new Set();
  let previous = null;
  for (const item of list) {
    seen.add(item.id);
    const r = renderItemRow(item);
    const want = previous ? previous.nextSibling : ui.itemRows.firstChild;
    if (r.tr !== want) ui.itemRows.insertBefore(r.tr, want);
    previous = r.tr;
  }
  for (const [id, r] of itemRows) {
    if (!seen.has(id)) {
      r.tr.remove();
      itemRows.delete(id);
    }
  }
  ui.itemsEmpty.hidden = itemRows.size > 0;
}

async function togglePause(id) {
  const r = itemRows.get(id);
  if (!r || toggling.has(id)) return;
  const pause = !r.item.paused;
  toggling.add(id);
  renderItemRow(r.item);
  const result = await adminApi(`/admin/api/items/${id}/${pause ? 'pause' : 'resume'}`, { method: 'POST' });
  toggling.delete(id);
  if (result.ok) {
    const item = result.data;
    renderItemRow(item);
    announce(
      ui.notice,
      `${pause ? 'Paused' : 'Resumed'} the sale of item ${item.id} (${item.name}).`,
      pause ? 'warn' : 'ok',
    );
  } else {
    if (itemRows.has(id)) renderItemRow(itemRows.get(id).item);
    if (result.status !== 401) {
      announce(ui.notice, `Could not ${pause ? 'pause' : 'resume'} item ${id}: ${result.error.message}`, 'error');
    }
  }
  const row = itemRows.get(id);
  if (row) row.toggle.focus();
}

// --- create an item -------------------------------------------------------------------

const createFields = {
  name: $('item-name'),
  priceCents: $('item-price'),
  stock: $('item-stock'),
  startsAt: $('item-starts'),
  endsAt: $('item-ends'),
};

function fieldError(input, message) {
  const box = document.getElementById(`${input.id}-error`);
  if (message) {
    input.setAttribute('aria-invalid', 'true');
    box.textContent = message;
    box.hidden = false;
  } else {
    input.removeAttribute('aria-invalid');
    box.textContent = '';
    box.hidden = true;
  }
}

function resetCreateDefaults() {
  const now = new Date();
  now.setSeconds(0, 0);
  createFields.startsAt.value = dateToLocalInput(now);
  createFields.endsAt.value = dateToLocalInput(new Date(now.getTime() + 60 * 60 * 1000));
}

ui.tzHint.textContent = `Times are in your time zone (${
  Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time'
}).`;
resetCreateDefaults();

ui.createForm.addEventListener('submit', async (event) => {
  event.preventDefault();
  announce(ui.createResult, '');
  for (const input of Object.values(createFields)) fieldError(input, '');

  const errors = {};
  const name = createFields.name.value.trim();
  if (!name) errors.name = 'Give the item a name.';
  const priceText = createFields.priceCents.value.trim();
  const price = Number(priceText);
  if (priceText === '' || !Number.isFinite(price) || price < 0 || !/^\d+(\.\d{1,2})?$/.test(priceText)) {
    errors.priceCents = 'Enter a price of 0 or more, with at most two decimals.';
  }
  const stockText = createFields.stock.value.trim();
  const stock = Number(stockText);
  if (!/^\d+$/.test(stockText) || stock < 1) errors.stock = 'Enter a stock of 1 or more units.';
  const startsAt = localInputToIso(createFields.startsAt.value);
  const endsAt = localInputToIso(createFields.endsAt.value);
  if (!startsAt) errors.startsAt = 'Choose when the sale starts.';
  if (!endsAt) errors.endsAt = 'Choose when the sale ends.';

  const invalid = Object.keys(errors);
  if (invalid.length) {
    for (const field of invalid) fieldError(createFields[field], errors[field]);
    createFields[invalid[0]].focus();
    return;
  }

  ui.createButton.disabled = true;
  const result = await adminApi('/admin/api/items', {
    method: 'POST',
    body: { name, priceCents: Math.round(price * 100), stock, startsAt, endsAt },
  });
  ui.createButton.disabled = false;
  if (result.ok) {
    const item = result.data;
    announce(ui.createResult, `Created item ${item.id}: ${item.name} (${fmt(item.totalStock)} units).`, 'ok');
    createFields.name.value = '';
    renderItems([...[...itemRows.values()].map((r) => r.item), item]);
    loadStats();
    return;
  }
  if (result.status === 401) return;
  const input = createFields[result.error.field];
  if (result.error.code === 'VALIDATION_FAILED' && input) {
    fieldError(input, result.error.message);
    input.focus();
  } else {
    announce(ui.createResult, `Could not create the item: ${result.error.message}`, 'error');
  }
});

// --- orders ---------------------------------------------------------------------------

const orderFilterInputs = {
  item: $('filter-item'),
  user: $('filter-user'),
  from: $('filter-from'),
  to: $('filter-to'),
  state: $('filter-state'),
};
const perPageSelect = $('filter-per-page');
let ordersPage = 1;
let ordersPages = 1;
let ordersRequest = 0;

function orderQuery(page) {
  const q = new URLSearchParams();
  const item = orderFilterInputs.item.value.trim();
  const user = orderFilterInputs.user.value.trim();
  if (item) q.set('item', item);
  if (user) q.set('user', user);
  if (orderFilterInputs.state.value) q.set('state', orderFilterInputs.state.value);
  const from = localInputToIso(orderFilterInputs.from.value);
  const to = localInputToIso(orderFilterInputs.to.value);
  if (from) q.set('from', from);
  if (to) q.set('to', to);
  q.set('page', String(page));
  q.set('perPage', perPageSelect.value);
  return q;
}

async function loadOrders(page = ordersPage) {
  for (const input of Object.values(orderFilterInputs)) fieldError(input, '');
  announce(ui.ordersError, '');
  for (const key of ['item', 'user']) {
    const v = orderFilterInputs[key].value.trim();
    if (v && !/^\d+$/.test(v)) {
      fieldError(orderFilterInputs[key], 'Enter a whole number, or leave it empty.');
      return;
    }
  }
  const mine = ++ordersRequest;
  const result = await adminApi(`/admin/api/orders?${orderQuery(page)}`);
  if (mine !== ordersRequest || !token) return;
  if (!result.ok) {
    if (result.status === 401) return;
    const input = orderFilterInputs[result.error.field];
    if (result.error.code === 'VALIDATION_FAILED' && input) fieldError(input, result.error.message);
    else announce(ui.ordersError, `Could not load orders: ${result.error.message}`, 'error');
    return;
  }
  const { orders = [], total = 0, perPage = 20 } = result.data;
  ordersPage = Number(result.data.page) || page;
  ordersPages = Math.max(1, Math.ceil(Number(total) / Number(perPage)));
  ui.orderRows.replaceChildren(
    ...orders.map((o) =>
      el(
        'tr',
        { dataset: { orderId: o.orderId } },
        el('td', { 'data-label': 'Order id' }, el('code', { text: o.orderId })),
        el('td', { class: 'num', 'data-label': 'Item', text: String(o.itemId) }),
        el('td', { class: 'num', 'data-label': 'User', text: String(o.userId) }),
        el('td', { 'data-label': 'State' }, el('span', { class: `state-${o.state}`, text: o.state })),
        el('td', { 'data-label': 'Placed' }, el('time', { datetime: o.createdAt, text: formatDateTime(o.createdAt) })),
      ),
    ),
  );
  ui.ordersEmpty.hidden = orders.length > 0;
  ui.ordersTotal.textContent = `${fmt(total)} order${Number(total) === 1 ? '' : 's'}`;
  ui.ordersPage.textContent = `Page ${ordersPage} of ${ordersPages}`;
  ui.ordersPrev.disabled = ordersPage <= 1;
  ui.ordersNext.disabled = ordersPage >= ordersPages;
}

ui.ordersForm.addEventListener('submit', (event) => {
  event.preventDefault();
  loadOrders(1);
});
ui.ordersClear.addEventListener('click', () => {
  for (const input of Object.values(orderFilterInputs)) input.value = '';
  loadOrders(1);
});
perPageSelect.addEventListener('change', () => loadOrders(1));
ui.ordersPrev.addEventListener('click', () => loadOrders(Math.max(1, ordersPage - 1)));
ui.ordersNext.addEventListener('click', () => loadOrders(Math.min(ordersPages, ordersPage + 1)));

// --- rules editor ---------------------------------------------------------------------

/** name → {policy (as stored, with the version the form was loaded from), form refs}. */
const policyForms = new Map();

function keyText(key) {
  if (typeof key === 'string') return key.replace('_', ' ');
  if (key && typeof key === 'object') {
    const [kind, value] = Object.entries(key)[0] || [];
    return kind === 'literal' ? `shared “${value}”` : `${kind} ${value ?? ''}`.trim();
  }
  return String(key);
}

function quotaText(windowMs, threshold) {
  const w = Number(windowMs);
  const t = Number(threshold);
  if (!Number.isFinite(w) || !Number.isFinite(t) || w <= 0) return '–';
  const span = w % 1000 === 0 ? `${fmt(w / 1000)} s` : `${fmt(w)} ms`;
  return `${fmt(t)} per ${span}`;
}

/** What each scope means, shown beside its select. */
const SCOPE_HINTS = {
  global: 'One limit for the whole shop: all of this policy\u2019s keys live in one Redis slot.',
  per_item: 'Each sale counts separately: its limiter keys live beside the item\u2019s stock.',
};

function renderPolicy(policy) {
  const slug = policy.name.replace(/[^A-Za-z0-9_-]/g, '-');
  const refs = { rules: new Map() };
  const idOf = (part) => `policy-${slug}-${part}`;

  refs.algorithm = el(
    'select',
    { id: idOf('algorithm'), name: 'algorithm' },
    el('option', { value: 'sliding_window', text: 'Sliding window' }),
    el('option', { value: 'token_bucket', text: 'Token bucket' }),
  );
  refs.enabled = el('input', { id: idOf('enabled'), type: 'checkbox', name: 'enabled' });
  refs.scopeHint = el('p', { id: idOf('scope-hint'), class: 'small muted scope-hint' });
  refs.scopeError = el('p', { id: idOf('scope-error'), class: 'field-error', hidden: true });
  refs.scope = el(
    'select',
    { id: idOf('scope'), name: 'scope', 'aria-describedby': `${refs.scopeHint.id} ${refs.scopeError.id}` },
    el('option', { value: 'global', text: 'Global' }),
    el('option', { value: 'per_item', text: 'Per item' }),
  );
  refs.scope.addEventListener('change', () => showScopeHint(refs));
  refs.error = el('p', { id: idOf('error'), class: 'field-error', role: 'alert', hidden: true });
  refs.result = el('p', { class: 'notice', role: 'status', 'aria-live': 'polite', hidden: true });
  refs.save = el('button', { type: 'submit', class: 'button button-primary', text: `Save ${policy.name}` });

  const rows = policy.rules.map((rule) => {
    const rslug = rule.name.replace(/[^A-Za-z0-9_-]/g, '-');
    const rid = (f) => idOf(`${rslug}-${f}`);
    const r = {};
    const labelled = (field, text, input) => [
      el('label', { for: rid(field), class: 'visually-hidden', text: `${text} of rule ${rule.name}` }),
      input,
    ];
    r.windowMs = el('input', {
      id: rid('windowMs'), type: 'number', min: '1', step: '1', inputmode: 'numeric', class: 'num-input',
      'aria-describedby': refs.error.id,
    });
    r.threshold = el('input', {
      id: rid('threshold'), type: 'number', min: '1', step: '1', inputmode: 'numeric', class: 'num-input',
      'aria-describedby': refs.error.id,
    });
    r.message = el('input', { id: rid('message'), type: 'text', 'aria-describedby': refs.error.id });
    r.quota = el('span', { class: 'muted small' });
    const updateQuota = () => {
      r.quota.textContent = quotaText(r.windowMs.value, r.threshold.value);
    };
    r.windowMs.addEventListener('input', updateQuota);
    r.threshold.addEventListener('input', updateQuota);
    r.updateQuota = updateQuota;
    refs.rules.set(rule.name, r);
    return el(
      'tr',
      { dataset: { rule: rule.name } },
      el('th', { scope: 'row', text: rule.name }),
      el('td', { class: 'small', 'data-label': 'Key', text: keyText(rule.key) }),
      el('td', { 'data-label': 'Window (ms)' }, ...labelled('windowMs', 'Window (ms)', r.windowMs)),
      el('td', { 'data-label': 'Threshold' }, ...labelled('threshold', 'Threshold', r.threshold)),
      el('td', { 'data-label': 'Allows' }, r.quota),
      el('td', { class: 'message-cell', 'data-label': 'Message when refused' }, ...labelled('message', 'Message', r.message)),
    );
  });

  refs.failMode = el('span', { class: 'badge badge-sold-out' });
  refs.version = el('span', { class: 'muted small' });
  refs.form = el(
    'form',
    { class: 'policy', novalidate: true, dataset: { policy: policy.name } },
    el(
      'fieldset',
      {},
      el('legend', {}, 'Policy ', el('strong', { text: policy.name }), ' ', refs.version),
      el(
        'div',
        { class: 'policy-settings' },
        el('div', { class: 'field field-narrow' }, el('label', { for: refs.algorithm.id, text: 'Algorithm' }), refs.algorithm),
        el(
          'div',
          { class: 'checkbox-field' },
          refs.enabled,
          el('label', { for: refs.enabled.id, text: 'Enabled' }),
        ),
        el('p', { class: 'small muted' }, 'When Redis is down: ', refs.failMode),
      ),
      el(
        'div',
        { class: 'field scope-field' },
        el('label', { for: refs.scope.id, text: 'Scope' }),
        el('div', { class: 'scope-control' }, refs.scope, refs.scopeHint),
        refs.scopeError,
      ),
      el(
        'div',
        { class: 'table-wrap' },
        el(
          'table',
          { class: 'table rules-table stack-on-phone' },
          el('caption', { class: 'visually-hidden', text: `Rules of policy ${policy.name}` }),
          el(
            'thead',
            {},
            el(
              'tr',
              {},
              el('th', { scope: 'col', text: 'Rule' }),
              el('th', { scope: 'col', text: 'Key' }),
              el('th', { scope: 'col', text: 'Window (ms)' }),
              el('th', { scope: 'col', text: 'Threshold' }),
              el('th', { scope: 'col', text: 'Allows' }),
              el('th', { scope: 'col', text: 'Message when refused' }),
            ),
          ),
          el('tbody', {}, rows),
        ),
      ),
      refs.error,
      el('div', { class: 'form-actions' }, refs.save, refs.result),
    ),
  );
  refs.form.addEventListener('submit', (event) => {
    event.preventDefault();
    savePolicy(policy.name);
  });
  return refs;
}

/** A policy's scope; rows from before scopes have none and mean `global`. */
const scopeOf = (policy) => policy.scope || 'global';

function showScopeHint(refs) {
  refs.scopeHint.textContent = SCOPE_HINTS[refs.scope.value] || '';
}

/** The scope's own error line, as fieldError does it (the form may not be in the page yet). */
function scopeError(refs, message) {
  if (message) refs.scope.setAttribute('aria-invalid', 'true');
  else refs.scope.removeAttribute('aria-invalid');
  refs.scopeError.textContent = message;
  refs.scopeError.hidden = !message;
}

function fillPolicy(refs, policy) {
  refs.version.textContent = Number.isInteger(policy.version) ? `version ${policy.version}` : '';
  refs.algorithm.value = policy.algorithm;
  refs.enabled.checked = Boolean(policy.enabled);
  refs.scope.value = scopeOf(policy);
  scopeError(refs, '');
  showScopeHint(refs);
  refs.failMode.textContent = policy.failMode === 'closed' ? 'refuse (fail closed)' : 'allow (fail open)';
  for (const rule of policy.rules) {
    const r = refs.rules.get(rule.name);
    if (!r) continue;
    r.windowMs.value = String(rule.windowMs);
    r.threshold.value = String(rule.threshold);
    r.message.value = rule.message;
    for (const input of [r.windowMs, r.threshold, r.message]) input.removeAttribute('aria-invalid');
    r.updateQuota();
  }
}

async function loadPolicies() {
  const result = await adminApi('/admin/api/policies');
  if (!token) return;
  if (!result.ok) {
    if (result.status !== 401) announce(ui.rulesError, `Could not load the rules: ${result.error.message}`, 'error');
    return;
  }
  announce(ui.rulesError, '');
  const policies = Array.isArray(result.data.policies) ? result.data.policies : [];
  policyForms.clear();
  ui.policies.replaceChildren(
    ...policies.map((policy) => {
      const refs = renderPolicy(policy);
      fillPolicy(refs, policy);
      policyForms.set(policy.name, { policy, refs });
      return refs.form;
    }),
  );
  const chosen = ui.auditPolicy.value;
  ui.auditPolicy.replaceChildren(
    el('option', { value: '', text: 'All policies' }),
    ...policies.map((p) => el('option', { value: p.name, text: p.name })),
  );
  ui.auditPolicy.value = chosen;
}

/** What changed in the form, as the PUT body; null when nothing did. */
function policyChange(entry) {
  const { policy, refs } = entry;
  const body = { rules: [] };
  const problems = [];
  if (refs.algorithm.value !== policy.algorithm) body.algorithm = refs.algorithm.value;
  if (refs.enabled.checked !== Boolean(policy.enabled)) body.enabled = refs.enabled.checked;
  if (refs.scope.value !== scopeOf(policy)) body.scope = refs.scope.value;
  for (const rule of policy.rules) {
    const r = refs.rules.get(rule.name);
    const change = { name: rule.name };
    for (const field of ['windowMs', 'threshold']) {
      const text = r[field].value.trim();
      if (!/^\d+$/.test(text)) {
        problems.push([r[field], `${field === 'windowMs' ? 'Window' : 'Threshold'} of rule ${rule.name} must be a whole number.`]);
        continue;
      }
      if (Number(text) !== Number(rule[field])) change[field] = Number(text);
    }
    if (r.message.value !== rule.message) change.message = r.message.value;
    if (Object.keys(change).length > 1) body.rules.push(change);
  }
  if (problems.length) return { problems };
  const changed = body.rules.length > 0 || 'algorithm' in body || 'enabled' in body || 'scope' in body;
  return changed ? { body } : { body: null };
}

async function savePolicy(name) {
  const entry = policyForms.get(name);
  if (!entry) return;
  const { refs } = entry;
  announce(refs.error, '');
  announce(refs.result, '');
  scopeError(refs, '');
  for (const r of refs.rules.values()) {
    for (const input of [r.windowMs, r.threshold, r.message]) input.removeAttribute('aria-invalid');
  }
  const change = policyChange(entry);
  if (change.problems) {
    for (const [input] of change.problems) input.setAttribute('aria-invalid', 'true');
    announce(refs.error, change.problems[0][1], 'error');
    change.problems[0][0].focus();
    return;
  }
  if (!change.body) {
    announce(refs.result, 'Nothing to save: no value was changed.', 'info');
    return;
  }
  refs.save.disabled = true;
  // The version this form was loaded from: if someone else saved since, the server
  // refuses (409 VERSION_CONFLICT) rather than overwrite what this operator never saw.
  const version = entry.policy.version;
  const result = await adminApi(`/admin/api/policies/${encodeURIComponent(name)}`, {
    method: 'PUT',
    body: change.body,
    headers: Number.isInteger(version) ? { 'If-Match': `"${version}"` } : {},
  });
  refs.save.disabled = false;
  if (!result.ok) {
    if (result.status === 401) return;
    if (result.error.code === 'VERSION_CONFLICT') {
      const reloaded = await reloadPolicy(name);
      announce(
        refs.error,
        `Not saved: someone else changed policy ${name} since you loaded it` +
          (reloaded ? ` (now version ${reloaded.version}). The form shows their version; make your change again.` : '. Reload the page to see their version.'),
        'error',
      );
      loadAudit();
    } else if (result.error.code === 'VALIDATION_FAILED' && result.error.field === 'scope') {
      // The policy's scope, not a rule: the message goes next to its select.
      scopeError(refs, sentence(result.error.message));
      announce(refs.error, 'Not saved: the scope was refused (see Scope above).', 'error');
      refs.scope.focus();
    } else if (result.error.code === 'VALIDATION_FAILED') {
      // Mark the fields of that kind that were changed (the message names the rule).
      const field = result.error.field;
      for (const rc of change.body.rules) {
        const r = refs.rules.get(rc.name);
        if (r && r[field] && field in rc) r[field].setAttribute('aria-invalid', 'true');
      }
      announce(refs.error, `Not saved: ${sentence(result.error.message)}`, 'error');
    } else {
      announce(refs.error, `Not saved: ${result.error.message}`, 'error');
    }
    return;
  }
  const stored = result.data;
  entry.policy = stored;
  fillPolicy(refs, stored);
  announce(refs.result, `Saved policy ${name}. In force on every instance within a second.`, 'ok');
  loadAudit();
}

/** Loads one policy again into its form (after a conflict); returns it, or null. */
async function reloadPolicy(name) {
  const entry = policyForms.get(name);
  const result = await adminApi(`/admin/api/policies/${encodeURIComponent(name)}`);
  if (!entry || !result.ok || !result.data) return null;
  entry.policy = result.data;
  fillPolicy(entry.refs, result.data);
  return result.data;
}

// --- audit ----------------------------------------------------------------------------

function describeChange(oldP, newP) {
  const lines = [];
  if (oldP.algorithm !== newP.algorithm) lines.push(`algorithm ${oldP.algorithm} → ${newP.algorithm}`);
  if (oldP.enabled !== newP.enabled) lines.push(newP.enabled ? 'enabled' : 'disabled');
  if (oldP.failMode !== newP.failMode) lines.push(`fail mode ${oldP.failMode} → ${newP.failMode}`);
  if (scopeOf(oldP) !== scopeOf(newP)) lines.push(`scope ${scopeOf(oldP)} → ${scopeOf(newP)}`);
  const before = new Map((oldP.rules || []).map((r) => [r.name, r]));
  for (const rule of newP.rules || []) {
    const was = before.get(rule.name);
    if (!was) {
      lines.push(`${rule.name}: added`);
      continue;
    }
    const parts = [];
    if (was.threshold !== rule.threshold) parts.push(`threshold ${was.threshold} → ${rule.threshold}`);
    if (was.windowMs !== rule.windowMs) parts.push(`window ${was.windowMs} ms → ${rule.windowMs} ms`);
    if (was.message !== rule.message) parts.push(`message “${was.message}” → “${rule.message}”`);
    if (parts.length) lines.push(`${rule.name}: ${parts.join(', ')}`);
  }
  return lines.length ? lines : ['no effective change'];
}

async function loadAudit() {
  const policy = ui.auditPolicy.value;
  const result = await adminApi(`/admin/api/audit${policy ? `?policy=${encodeURIComponent(policy)}` : ''}`);
  if (!token) return;
  if (!result.ok) {
    if (result.status !== 401) announce(ui.auditError, `Could not load the changes: ${result.error.message}`, 'error');
    return;
  }
  announce(ui.auditError, '');
  const entries = Array.isArray(result.data.entries) ? result.data.entries : [];
  ui.auditList.replaceChildren(
    ...entries.map((e) =>
      el(
        'li',
        { class: 'audit-entry' },
        el(
          'p',
          { class: 'audit-head' },
          el('strong', { text: e.policy }),
          ` changed by ${e.changedBy} · `,
          el('time', { datetime: e.changedAt, class: 'muted', text: formatDateTime(e.changedAt) }),
        ),
        el('ul', { class: 'audit-changes' }, describeChange(e.old, e.new).map((line) => el('li', { text: line }))),
      ),
    ),
  );
  ui.auditEmpty.hidden = entries.length > 0;
}

ui.auditPolicy.addEventListener('change', loadAudit);
ui.auditRefresh.addEventListener('click', loadAudit);

// --- start ----------------------------------------------------------------------------

(async () => {
  if (!token) {
    ui.tokenInput.focus();
    return;
  }
  const outcome = await checkToken(token);
  if (outcome.error) signedOut(outcome.error);
  else showSignedIn(outcome.name);
})();
