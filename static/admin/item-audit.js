// An item's history, in a dialog: who created, edited, paused, resumed, ended or
// archived it or set its waiting room, when, and what changed (GET
// /admin/api/items/{id}/audit, newest first). A waiting room's entry holds its whole
// settings before and after; the dialog lists the fields that changed.
import { announce, el } from '../dom.js';
import { formatDateTime, formatNumber, formatPrice } from '../format.js';
import { itemActionLabel, RoomOrder } from '../words.js';
import { adminApi } from './session.js';

const roomOrderLabel = (word) => Object.values(RoomOrder).find((o) => o.word === word)?.label || word;

/** The fields an entry may carry (the API's spelling): their name in words and format. */
const FIELDS = {
  name: ['name', (v) => `“${v}”`],
  priceCents: ['price', formatPrice],
  startsAt: ['start', formatDateTime],
  endsAt: ['end', formatDateTime],
  stock: ['stock', formatNumber],
  totalStock: ['stock', formatNumber],
  paused: ['paused', (v) => (v ? 'yes' : 'no')],
  archivedAt: ['archived', (v) => (v ? formatDateTime(v) : 'no')],
  // A waiting room's settings (action `room`).
  enabled: ['waiting room', (v) => (v ? 'on' : 'off')],
  order: ['order', (v) => roomOrderLabel(v)],
  prequeueStartsAt: ['pre-queue opens', (v) => formatDateTime(v)],
  admitPerSecond: ['admitted per second', formatNumber],
  maxActive: ['live passes at most', formatNumber],
  passTtlSecs: ['pass valid for', (v) => `${formatNumber(v)} s`],
  abandonAfterSecs: ['place lost after', (v) => `${formatNumber(v)} s`],
  message: ['message', (v) => (v ? `“${v}”` : 'none')],
  // A closed room reopened by a stock raise.
  closed: ['queue', (v) => (v ? 'closed, sold out' : 'reopened')],
  closedAt: ['closed at', (v) => formatDateTime(v)],
};

const show = (key, value) => {
  if (value === null || value === undefined) return '–';
  const format = FIELDS[key]?.[1];
  return format ? format(value) : typeof value === 'object' ? JSON.stringify(value) : String(value);
};
const nameOf = (key) => FIELDS[key]?.[0] || key;

/** One line per field an entry changed; a creation lists what the item started with. */
export function describeItemChange(entry) {
  const before = entry.old && typeof entry.old === 'object' ? entry.old : null;
  const after = entry.new && typeof entry.new === 'object' ? entry.new : {};
  if (!before) {
    // What the item started with; not paused and not archived go without saying.
    return Object.entries(after)
      .filter(([key, value]) => !((key === 'paused' && value === false) || (key === 'archivedAt' && value === null)))
      .map(([key, value]) => `${nameOf(key)} ${show(key, value)}`);
  }
  // In this page's order of the fields: Postgres's JSON keeps its own.
  const rank = (key) => (key in FIELDS ? Object.keys(FIELDS).indexOf(key) : Infinity);
  const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort((a, b) => rank(a) - rank(b));
  return keys
    .filter((key) => JSON.stringify(before[key]) !== JSON.stringify(after[key]))
    .map((key) => `${nameOf(key)} ${show(key, before[key])} → ${show(key, after[key])}`);
}

function entryItem(entry) {
  const lines = describeItemChange(entry);
  return el(
    'li',
    { class: 'audit-entry', dataset: { action: entry.action } },
    el(
      'p',
      { class: 'audit-head' },
      el('strong', { text: itemActionLabel(entry.action) }),
      ` by ${entry.changedBy} · `,
      el('time', { datetime: entry.changedAt, class: 'muted', text: formatDateTime(entry.changedAt) }),
    ),
    lines.length ? el('ul', { class: 'audit-changes' }, lines.map((line) => el('li', { text: line }))) : null,
  );
}

/** Opens the history of `item` in a dialog. */
export async function showItemHistory(item) {
  const list = el('ol', { class: 'audit-list', 'aria-label': `Changes to item ${item.id}` });
  const status = el('p', { class: 'muted small', role: 'status', text: 'Loading…' });
  const close = el('button', { type: 'button', class: 'button', text: 'Close' });
  const dialog = el(
    'dialog',
    { class: 'dialog history-dialog', 'aria-labelledby': 'history-title' },
    el('h2', { id: 'history-title', text: `History of item ${item.id}: ${item.name}` }),
    status,
    list,
    el('div', { class: 'dialog-actions' }, close),
  );
  close.addEventListener('click', () => dialog.close());
  dialog.addEventListener('close', () => dialog.remove());
  document.body.append(dialog);
  dialog.showModal();
  close.focus();

  const result = await adminApi(`/admin/api/items/${item.id}/audit`);
  if (!dialog.open) return;
  if (!result.ok) {
    announce(status, `Could not load the history: ${result.error.message}`, 'error');
    return;
  }
  const entries = Array.isArray(result.data && result.data.entries) ? result.data.entries : [];
  list.replaceChildren(...entries.map(entryItem));
  status.textContent = entries.length ? `${formatNumber(entries.length)} change${entries.length === 1 ? '' : 's'}, newest first.` : 'No change recorded.';
}
