// The orders panel: filters (item, user, time, state), the table and its pager.
import { announce, byId, el, fieldError } from '../dom.js';
import { formatDateTime, formatNumber, localInputToIso } from '../format.js';
import { ErrorCode, ORDER_STATES } from '../words.js';
import { adminApi, signedIn } from './session.js';

const ui = {
  form: byId('orders-form'),
  clear: byId('orders-clear'),
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
  item: byId('filter-item'),
  user: byId('filter-user'),
  from: byId('filter-from'),
  to: byId('filter-to'),
  state: byId('filter-state'),
};

let page = 1;
let pages = 1;
let request = 0;

function query(wanted) {
  const q = new URLSearchParams();
  const item = filters.item.value.trim();
  const user = filters.user.value.trim();
  if (item) q.set('item', item);
  if (user) q.set('user', user);
  if (filters.state.value) q.set('state', filters.state.value);
  const from = localInputToIso(filters.from.value);
  const to = localInputToIso(filters.to.value);
  if (from) q.set('from', from);
  if (to) q.set('to', to);
  q.set('page', String(wanted));
  q.set('perPage', ui.perPage.value);
  return q;
}

function orderRow(o) {
  return el(
    'tr',
    { dataset: { orderId: o.orderId } },
    el('td', { 'data-label': 'Order id' }, el('code', { text: o.orderId })),
    el('td', { class: 'num', 'data-label': 'Item', text: String(o.itemId) }),
    el('td', { class: 'num', 'data-label': 'User', text: String(o.userId) }),
    el('td', { 'data-label': 'State' }, el('span', { class: `state-${o.state}`, text: o.state })),
    el('td', { 'data-label': 'Placed' }, el('time', { datetime: o.createdAt, text: formatDateTime(o.createdAt) })),
  );
}

/** Loads one page of the orders the filters select (the current page by default). */
export async function loadOrders(wanted = page) {
  for (const input of Object.values(filters)) fieldError(input, '');
  announce(ui.error, '');
  for (const key of ['item', 'user']) {
    const v = filters[key].value.trim();
    if (v && !/^\d+$/.test(v)) {
      fieldError(filters[key], 'Enter a whole number, or leave it empty.');
      return;
    }
  }
  const mine = ++request;
  const result = await adminApi(`/admin/api/orders?${query(wanted)}`);
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
  ui.page.textContent = `Page ${page} of ${pages}`;
  ui.prev.disabled = page <= 1;
  ui.next.disabled = page >= pages;
}

filters.state.append(...ORDER_STATES.map(({ word, label }) => el('option', { value: word, text: label })));
ui.form.addEventListener('submit', (event) => {
  event.preventDefault();
  loadOrders(1);
});
ui.clear.addEventListener('click', () => {
  for (const input of Object.values(filters)) input.value = '';
  loadOrders(1);
});
ui.perPage.addEventListener('change', () => loadOrders(1));
ui.prev.addEventListener('click', () => loadOrders(Math.max(1, page - 1)));
ui.next.addEventListener('click', () => loadOrders(Math.min(pages, page + 1)));
