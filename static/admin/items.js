// The items table: every item with its stock and what it sold (units, sell-through, how
// long it took to sell out, revenue of paid orders), its sale window and status, and per
// item Edit, Pause / Resume, End now, Archive, its history, its sale report (a page of
// its own, report.html) and its waiting room (the panel, waiting-room.js, listens for
// those buttons by their data-room-item).
// A search box narrows the rows by name or id; archived items are listed on request.
// Rows are keyed by item id and kept across polls, so a button keeps its focus.
import { announce, byId, confirmDialog, el, keepInOrder } from '../dom.js';
import { formatDateRange, formatDateTime, formatDuration, formatNumber, formatPercent, formatPrice } from '../format.js';
import { OrderState, Phase, phaseOf } from '../words.js';
import { showItemHistory } from './item-audit.js';
import { editItem } from './item-edit.js';
import { adminApi, loadPanel, signedIn } from './session.js';

const ui = {
  rows: byId('item-rows'),
  empty: byId('items-empty'),
  error: byId('items-error'),
  search: byId('items-search'),
  archived: byId('items-archived'),
  count: byId('items-count'),
  notice: byId('notice'),
};

/** id → {tr, item, …cells} of the items table. */
const itemRows = new Map();
/** Items with a request on the wire (pause, resume, end, archive): their buttons wait. */
const busy = new Set();

/** The items in the table, in its order. */
export function itemList() {
  return [...itemRows.values()].map((r) => r.item);
}

/** An item of the table by id, if it is there. */
export function itemOf(id) {
  const row = itemRows.get(Number(id));
  return row ? row.item : undefined;
}

/** The name of an item in the table, if it is there. */
export function itemName(id) {
  const item = itemOf(id);
  return item ? item.name : undefined;
}

// --- what an item sold -------------------------------------------------------------------

/** Units sold (live orders: awaiting payment or paid) as a share of the item's stock. */
const sellThrough = (item) => (Number(item.totalStock) > 0 ? (Number(item.sold) || 0) / Number(item.totalStock) : 0);

/** How long the sale took to sell out, from its start; null while it has not. */
function soldOutAfter(item) {
  const at = Date.parse(item.soldOutAt);
  const start = Date.parse(item.startsAt);
  return Number.isFinite(at) && Number.isFinite(start) ? Math.max(0, at - start) : null;
}

// --- the rows ------------------------------------------------------------------------------

function button(text, onclick, quiet = false) {
  return el('button', { type: 'button', class: `button button-small${quiet ? ' button-quiet' : ''}`, text, onclick });
}

function createItemRow(item) {
  const id = item.id;
  const r = {};
  r.id = el('td', { class: 'num', 'data-label': 'ID' });
  r.nameText = el('span', { class: 'item-title' });
  r.window = el('span', { class: 'window-text small muted' });

  r.price = el('td', { class: 'num', 'data-label': 'Price' });
  r.stock = el('td', { class: 'num', 'data-label': 'Stock left' });
  // Units sold, and as a share of the stock (sell-through); how many await payment.
  r.soldCount = el('span', { class: 'sold-count' });
  r.shareText = el('span', { class: 'share-text' });
  r.shareMeter = el('meter', { min: 0, max: 1, value: 0, class: 'share', 'aria-hidden': 'true' });
  r.held = el('span', { class: 'held-count small muted' });
  r.sold = el(
    'td',
    { class: 'num sold-cell', 'data-label': 'Sold (sell-through)' },
    el('span', { class: 'cell-stack' }, el('span', {}, r.soldCount, ' · ', r.shareText), r.shareMeter, r.held),
  );
  r.soldOut = el('td', { class: 'num', 'data-label': 'Sold out after' });
  r.revenue = el('td', { class: 'num', 'data-label': 'Revenue (paid)' });
  r.badge = el('span', { class: 'badge' });
  r.edit = button('Edit', () => openEdit(id));
  r.end = button('End now', () => endSale(id));
  r.archive = button('Archive', () => archive(id));
  r.toggle = el('button', { type: 'button', class: 'button button-small', onclick: () => togglePause(id) });
  r.room = el('button', { type: 'button', class: 'button button-small button-quiet', text: 'Waiting room', dataset: { roomItem: String(id) } });
  r.history = button('History', () => openHistory(id), true);
  r.report = el('a', { class: 'button button-small button-quiet', href: `/admin/report.html?item=${id}`, text: 'Report' });
  // What the operator reads about the item stays with its name; what changes it, at the end.
  r.name = el(
    'td',
    { class: 'name-cell', 'data-label': 'Item' },
    el('span', { class: 'cell-stack' }, r.nameText, r.window, el('span', { class: 'item-links' }, r.history, r.report, r.room)),
  );
  r.tr = el(
    'tr',
    { dataset: { itemId: String(id) } },
    r.id,
    r.name,
    r.price,
    r.stock,
    r.sold,
    r.soldOut,
    r.revenue,
    el('td', { 'data-label': 'Status' }, r.badge),
    el(
      'td',
      { class: 'action' },
      el('span', { class: 'row-actions item-actions' }, r.edit, r.toggle, r.end, r.archive),
    ),
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
  const label = `item ${item.id} (${item.name})`;
  const phase = phaseOf(item);
  const archived = phase === Phase.ARCHIVED;
  const over = archived || phase === Phase.ENDED;
  r.tr.dataset.phase = phase.word;
  r.id.textContent = String(item.id);
  r.nameText.textContent = item.name;
  r.window.textContent = formatDateRange(item.startsAt, item.endsAt);
  r.window.title = `${formatDateTime(item.startsAt)} – ${formatDateTime(item.endsAt)}`;
  r.price.textContent = formatPrice(item.priceCents);
  r.stock.textContent = `${formatNumber(item.remainingStock)} / ${formatNumber(item.totalStock)}`;

  const sold = Number(item.sold) || 0;
  const held = Number(item.held) || 0;
  r.sold.dataset.sold = String(sold);
  r.sold.dataset.held = String(held);
  r.soldCount.textContent = formatNumber(sold);
  r.held.textContent = held > 0 ? `${formatNumber(held)} ${OrderState.PENDING_PAYMENT.label.toLowerCase()}` : '';
  r.held.hidden = held === 0;
  const share = sellThrough(item);
  r.shareMeter.value = Math.min(1, share);
  r.shareText.textContent = formatPercent(share);
  const after = soldOutAfter(item);
  r.soldOut.textContent = after === null ? '–' : formatDuration(after);
  r.soldOut.title = after === null ? 'Not sold out' : `Sold out at ${formatDateTime(item.soldOutAt)}`;
  r.revenue.textContent = formatPrice(Number(item.revenueCents) || 0);

  r.badge.textContent = phase.label;
  r.badge.className = `badge badge-${phase.word}`;

  const waiting = busy.has(item.id);
  r.edit.disabled = waiting || archived;
  r.edit.setAttribute('aria-label', `Edit ${label}`);
  r.end.disabled = waiting || over;
  r.end.setAttribute('aria-label', `End the sale of ${label} now`);
  r.archive.disabled = waiting || archived;
  r.archive.setAttribute('aria-label', `Archive ${label}`);
  r.toggle.textContent = item.paused ? 'Resume' : 'Pause';
  r.toggle.setAttribute('aria-label', `${item.paused ? 'Resume' : 'Pause'} ${label}`);
  r.toggle.disabled = waiting || over;
  r.toggle.classList.toggle('button-primary', Boolean(item.paused) && !over);
  r.room.disabled = archived;
  r.room.setAttribute('aria-label', `Waiting room of ${label}`);
  r.history.setAttribute('aria-label', `History of ${label}`);
  r.report.setAttribute('aria-label', `Sale report of ${label}`);
  return r;
}

/** Whether a row answers the search: a name containing it, or the id it spells. */
function matches(item, query) {
  if (!query) return true;
  const q = query.toLowerCase();
  return item.name.toLowerCase().includes(q) || String(item.id) === q.replace(/^#/, '');
}

function applySearch() {
  const query = ui.search.value.trim();
  let shown = 0;
  for (const r of itemRows.values()) {
    const match = matches(r.item, query);
    r.tr.hidden = !match;
    if (match) shown += 1;
  }
  const total = itemRows.size;
  ui.empty.hidden = shown > 0;
  ui.empty.textContent = total === 0
    ? ui.archived.checked ? 'No item yet.' : 'No item yet (archived ones are left out).'
    : `No item matches “${query}”.`;
  ui.count.textContent = query
    ? `${formatNumber(shown)} of ${formatNumber(total)} items`
    : `${formatNumber(total)} item${total === 1 ? '' : 's'}${ui.archived.checked ? ', archived ones included' : ''}`;
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
  applySearch();
}

let request = 0;
/** Bumped by every change made here: a list asked for before it would undo it on screen. */
let changes = 0;
/** Loads the items (archived ones too when asked), newest first. */
export async function loadItems() {
  const mine = ++request;
  const seen = changes;
  const query = ui.archived.checked ? '?archived=true' : '';
  const data = await loadPanel(`/admin/api/items${query}`, ui.error, 'the items');
  if (!data || mine !== request || seen !== changes) return;
  renderItems(Array.isArray(data.items) ? data.items : []);
}

/** Adds an item just created, before the next poll lists it (newest first). */
export function addItem(item) {
  changes += 1;
  renderItems([item, ...itemList().filter((i) => i.id !== item.id)]);
}

/** Puts an item's new state in its row; an archived one leaves the default list. */
function replaceItem(item) {
  changes += 1;
  if (item.archivedAt && !ui.archived.checked) {
    renderItems(itemList().filter((i) => i.id !== item.id));
  } else if (itemRows.has(item.id)) {
    renderItemRow(item);
    applySearch();
  }
}

// --- what an operator does to an item ---------------------------------------------------------

/** Runs an item action (`pause`, `resume`, `end`, `archive`); the item, or null. */
async function act(id, action, failure) {
  const r = itemRows.get(id);
  if (!r || busy.has(id)) return null;
  busy.add(id);
  renderItemRow(r.item);
  changes += 1;
  const result = await adminApi(`/admin/api/items/${id}/${action}`, { method: 'POST' });
  busy.delete(id);
  if (itemRows.has(id)) renderItemRow(itemRows.get(id).item);
  if (result.ok) {
    replaceItem(result.data);
    return result.data;
  }
  if (result.status !== 401 && signedIn()) announce(ui.notice, `${failure}: ${result.error.message}`, 'error');
  return null;
}

/** Focus back on a row's button after it was redrawn, if the row is still listed. */
function refocus(id, which) {
  const row = itemRows.get(id);
  if (row && !row.tr.hidden && !row[which].disabled) row[which].focus();
}

async function togglePause(id) {
  const r = itemRows.get(id);
  if (!r) return;
  const pause = !r.item.paused;
  const item = await act(id, pause ? 'pause' : 'resume', `Could not ${pause ? 'pause' : 'resume'} item ${id}`);
  if (item) {
    announce(ui.notice, `${pause ? 'Paused' : 'Resumed'} the sale of item ${item.id} (${item.name}).`, pause ? 'warn' : 'ok');
  }
  refocus(id, 'toggle');
}

async function endSale(id) {
  const r = itemRows.get(id);
  if (!r) return;
  const { name } = r.item;
  const sure = await confirmDialog({
    title: `End the sale of ${name} now?`,
    text: 'Shoppers can no longer buy it from this moment, and it leaves the shop. Its orders stay; unpaid ones can still be paid until their deadline. This cannot be undone.',
    yes: 'End the sale now',
  });
  if (!sure) return;
  const item = await act(id, 'end', `Could not end the sale of item ${id}`);
  if (item) announce(ui.notice, `Ended the sale of item ${item.id} (${item.name}).`, 'warn');
}

async function archive(id) {
  const r = itemRows.get(id);
  if (!r) return;
  const { name } = r.item;
  const sure = await confirmDialog({
    title: `Archive ${name}?`,
    text: 'Its sale ends now if it is still on, and it leaves the shop and this list (“Show archived” lists it again). Its orders stay. This cannot be undone.',
    yes: 'Archive the item',
  });
  if (!sure) return;
  const item = await act(id, 'archive', `Could not archive item ${id}`);
  if (item) announce(ui.notice, `Archived item ${item.id} (${item.name}): it is no longer in the shop.`, 'warn');
}

async function openEdit(id) {
  const r = itemRows.get(id);
  if (!r) return;
  const item = await editItem(r.item);
  if (!item) return;
  replaceItem(item);
  announce(ui.notice, `Saved item ${item.id} (${item.name}).`, 'ok');
}

function openHistory(id) {
  const r = itemRows.get(id);
  if (r) showItemHistory(r.item);
}

ui.search.addEventListener('input', applySearch);
ui.archived.addEventListener('change', loadItems);
