// The orders panel: filters (order id, item, user, time, state), the table (item name,
// amount, state in words, placed and paid times) and its pager, and the export of every
// order the filters select as CSV.
import { announce, byId, el, fieldError } from '../dom.js';
import { formatDateTime, formatNumber, formatPrice, localInputToIso } from '../format.js';
import { ErrorCode, ORDER_STATES, orderStateLabel } from '../words.js';
import { adminApi, adminDownload, saveFile, signedIn } from './session.js';

const ui = {
  form: byId('orders-form'),
  clear: byId('orders-clear'),
  exportButton: byId('orders-export'),
  exported: byId('orders-exported'),
  error: byId('orders-error'),
  rows: byId('order-rows'),
  empty: byId('orders-empty'),
  total: byId('orders-total'),
  prev: byId('orders-prev'),
  next: byId('orders-next'),
  page: byId('orders-page'),
  perPage: byId('filter-per-page'),
};

/** The filters by the API's query names (a refusal's `field`). */
const filters = {
  order: byId('filter-order'),
  item: byId('filter-item'),
  user: byId('filter-user'),
  from: byId('filter-from'),
  to: byId('filter-to'),
  state: byId('filter-state'),
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

let page = 1;
let pages = 1;
let request = 0;

/** Checks the filters typed by hand; false (with the field's message) when one is wrong. */
function checkFilters() {
  for (const input of Object.values(filters)) fieldError(input, '');
  announce(ui.error, '');
  for (const key of ['item', 'user']) {
    const v = filters[key].value.trim();
    if (v && !/^\d+$/.test(v)) {
      fieldError(filters[key], 'Enter a whole number, or leave it empty.');
      return false;
    }
  }
  const order = filters.order.value.trim();
  if (order && !UUID.test(order)) {
    fieldError(filters.order, 'Enter a whole order id (36 characters, like 01a2345c-6789-4abc-8def-0123456789ab), or leave it empty.');
    return false;
  }
  return true;
}

/** The filters as a query (the table's and the export's). */
function filterQuery() {
  const q = new URLSearchParams();
  for (const key of ['order', 'item', 'user']) {
    const v = filters[key].value.trim();
    if (v) q.set(key, v);
  }
  if (filters.state.value) q.set('state', filters.state.value);
  const from = localInputToIso(filters.from.value);
  const to = localInputToIso(filters.to.value);
  if (from) q.set('from', from);
  if (to) q.set('to', to);
  return q;
}

/** A time cell: the instant, or a dash. */
function timeCell(label, iso) {
  return el(
    'td',
    { class: 'time-cell', 'data-label': label },
    iso ? el('time', { datetime: iso, text: formatDateTime(iso) }) : el('span', { class: 'muted', text: '–' }),
  );
}

function orderRow(o) {
  const item = el(
    'span',
    { class: 'cell-stack' },
    o.itemName ? el('span', { class: 'item-title', text: o.itemName }) : null,
    el('span', { class: o.itemName ? 'muted small' : '', text: `#${o.itemId}` }),
  );
  return el(
    'tr',
    { dataset: { orderId: o.orderId, state: o.state } },
    el('td', { class: 'order-id-cell', 'data-label': 'Order id' }, el('code', { text: o.orderId })),
    el('td', { class: 'name-cell', 'data-label': 'Item' }, item),
    el('td', { class: 'num', 'data-label': 'User', text: String(o.userId) }),
    el('td', { class: 'num', 'data-label': 'Amount', text: o.amountCents === undefined ? '–' : formatPrice(o.amountCents) }),
    el('td', { 'data-label': 'State' }, el('span', { class: `state-${o.state}`, text: orderStateLabel(o.state) })),
    timeCell('Placed', o.createdAt),
    timeCell('Paid', o.paidAt),
  );
}

/** Loads one page of the orders the filters select (the current page by default). */
export async function loadOrders(wanted = page) {
  if (!checkFilters()) return;
  const q = filterQuery();
  q.set('page', String(wanted));
  q.set('perPage', ui.perPage.value);
  const mine = ++request;
  const result = await adminApi(`/admin/api/orders?${q}`);
  if (mine !== request || !signedIn()) return;
  if (!result.ok) {
    if (result.status === 401) return;
    const input = filters[result.error.field];
    if (result.error.code === ErrorCode.VALIDATION_FAILED && input) fieldError(input, result.error.message);
    else announce(ui.error, `Could not load orders: ${result.error.message}`, 'error');
    return;
  }
  const { orders = [], total = 0, perPage = 20 } = result.data;
  page = Number(result.data.page) || wanted;
  pages = Math.max(1, Math.ceil(Number(total) / Number(perPage)));
  ui.rows.replaceChildren(...orders.map(orderRow));
  ui.empty.hidden = orders.length > 0;
  ui.total.textContent = `${formatNumber(total)} order${Number(total) === 1 ? '' : 's'}`;
  ui.page.textContent = `Page ${formatNumber(page)} of ${formatNumber(pages)}`;
  ui.prev.disabled = page <= 1;
  ui.next.disabled = page >= pages;
}

/** "orders-20261202-140501.csv": the download's name unless the server names it. */
function exportName() {
  const pad = (n) => String(n).padStart(2, '0');
  const d = new Date();
  return `orders-${d.getFullYear()}${pad(d.getMonth() + 1)}${pad(d.getDate())}-${pad(d.getHours())}${pad(d.getMinutes())}${pad(d.getSeconds())}.csv`;
}

/** Downloads every order the filters select as CSV (the token rides in a header). */
async function exportCsv() {
  announce(ui.exported, '');
  if (!checkFilters()) return;
  // The table shows what the file holds (its first page).
  loadOrders(1);
  ui.exportButton.disabled = true;
  ui.exportButton.textContent = 'Exporting…';
  const file = await adminDownload(`/admin/api/orders.csv?${filterQuery()}`, exportName());
  ui.exportButton.disabled = false;
  ui.exportButton.textContent = 'Export CSV';
  if (!signedIn()) return;
  if (!file.ok) {
    if (file.status !== 401) announce(ui.exported, `Could not export the orders: ${file.message}`, 'error');
    return;
  }
  const size = saveFile(file);
  announce(ui.exported, `Downloaded ${file.name} (${size}): the orders these filters select, all pages.`, 'ok');
}

filters.state.append(...ORDER_STATES.map(({ word, label }) => el('option', { value: word, text: label })));
ui.form.addEventListener('submit', (event) => {
  event.preventDefault();
  loadOrders(1);
});
ui.clear.addEventListener('click', () => {
  for (const input of Object.values(filters)) input.value = '';
  announce(ui.exported, '');
  loadOrders(1);
});
ui.exportButton.addEventListener('click', exportCsv);
ui.perPage.addEventListener('change', () => loadOrders(1));
ui.prev.addEventListener('click', () => loadOrders(Math.max(1, page - 1)));
ui.next.addEventListener('click', () => loadOrders(Math.min(pages, page + 1)));
