// The items table: stock, orders by state, sale window and status of each item, with
// its pause / resume button and a button that shows its waiting room (the panel,
// waiting-room.js, listens for those by their data-room-item). Rows are keyed by item id
// and kept across polls, so a button keeps its focus.
import { announce, byId, el, keepInOrder } from '../dom.js';
import { formatDateTime, formatNumber, formatPrice } from '../format.js';
import { ORDER_STATES, operatorPhaseOf } from '../words.js';
import { adminApi } from './session.js';

const ui = {
  rows: byId('item-rows'),
  empty: byId('items-empty'),
  notice: byId('notice'),
};

/** id → {tr, item, …cells} of the items table. */
const itemRows = new Map();
/** Items with a pause/resume request on the wire. */
const toggling = new Set();
/** item id → state → orders, from the last stats answer. */
let orderStates = {};

/** The items in the table, in its order. */
export function itemList() {
  return [...itemRows.values()].map((r) => r.item);
}

/** The name of an item in the table, if it is there. */
export function itemName(id) {
  const row = itemRows.get(Number(id));
  return row ? row.item.name : undefined;
}

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
  r.room = el('button', { type: 'button', class: 'button button-small button-quiet', dataset: { roomItem: String(item.id) } });
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
    el('td', { class: 'action' }, el('span', { class: 'row-actions' }, r.room, r.toggle)),
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
  r.stock.textContent = `${formatNumber(item.remainingStock)} / ${formatNumber(item.totalStock)}`;
  const counts = orderStates[item.id] || {};
  r.orders.replaceChildren(
    ...ORDER_STATES.map(({ word: state, label }) => {
      const count = counts[state] || 0;
      return el(
        'span',
        { class: `state-count state-${state}`, dataset: { state, count: String(count) } },
        `${formatNumber(count)} ${label.toLowerCase()}`,
      );
    }),
  );
  r.window.textContent = `${formatDateTime(item.startsAt)} – ${formatDateTime(item.endsAt)}`;
  const phase = operatorPhaseOf(item);
  r.badge.textContent = phase.label;
  r.badge.className = `badge badge-${phase.word}`;
  const busy = toggling.has(item.id);
  r.toggle.textContent = item.paused ? 'Resume' : 'Pause';
  r.toggle.setAttribute('aria-label', `${item.paused ? 'Resume' : 'Pause'} item ${item.id} (${item.name})`);
  r.toggle.disabled = busy;
  r.toggle.classList.toggle('button-primary', item.paused);
  r.room.textContent = 'Waiting room';
  r.room.setAttribute('aria-label', `Waiting room of item ${item.id} (${item.name})`);
  return r;
}

function renderItems(list) {
  const seen = new Set(list.map((item) => item.id));
  keepInOrder(ui.rows, list.map((item) => renderItemRow(item).tr));
  for (const [id, r] of itemRows) {
    if (!seen.has(id)) {
      r.tr.remove();
      itemRows.delete(id);
    }
  }
  ui.empty.hidden = itemRows.size > 0;
}

/** Shows the items of a stats answer, with their orders by state (item → state → count). */
export function showItems(list, ordersByState) {
  orderStates = ordersByState;
  renderItems(list);
}

/** Adds an item just created, before the next poll lists it. */
export function addItem(item) {
  renderItems([...[...itemRows.values()].map((r) => r.item), item]);
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
