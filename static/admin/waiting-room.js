// The waiting-room panel: one item's queue at a time, chosen in the panel's select or by
// an item row's "Waiting room" button. Its settings form (saved with PUT; the answer is
// what is stored) and its live figures, sampled every 2 s while the dashboard is open and
// drawn by charts.js. The server keeps no history of these figures: the chart begins
// when the item is chosen.
import { announce, byId, el, fieldError } from '../dom.js';
import { dateToLocalInput, formatDateTime, formatNumber, formatTime, localInputToIso, sentence } from '../format.js';
import { ErrorCode, RoomOrder } from '../words.js';
import { renderLineChart } from './charts.js';
import { itemList, itemName, itemOf } from './items.js';
import { adminApi, loadPanel } from './session.js';

/** How often the figures are sampled (the panel's poll, admin.js). */
export const ROOM_SAMPLE_MS = 2000;
const STEP_S = ROOM_SAMPLE_MS / 1000;
/** Five minutes of samples. */
const POINTS = 300 / STEP_S;

const ui = {
  select: byId('room-item'),
  error: byId('room-error'),
  empty: byId('room-empty'),
  body: byId('room-body'),
  updated: byId('room-updated'),
  waiting: byId('room-waiting'),
  admittedMinute: byId('room-admitted-minute'),
  livePasses: byId('room-live-passes'),
  abandoned: byId('room-abandoned'),
  totals: byId('room-totals'),
  closed: byId('room-closed'),
  chart: byId('chart-room'),
  form: byId('room-form'),
  version: byId('room-version'),
  orderHint: byId('room-order-hint'),
  changed: byId('room-changed'),
  changedText: byId('room-changed-text'),
  reload: byId('room-reload'),
  save: byId('room-save'),
  result: byId('room-result'),
  itemRows: byId('item-rows'),
};

/** The form's inputs by the API's field names (a refusal's `field`). */
const fields = {
  enabled: byId('room-enabled'),
  order: byId('room-order'),
  prequeueStartsAt: byId('room-prequeue'),
  admitPerSecond: byId('room-admit'),
  maxActive: byId('room-max-active'),
  passTtlSecs: byId('room-pass-ttl'),
  abandonAfterSecs: byId('room-abandon'),
  message: byId('room-message'),
};

/** The whole-number settings: their bounds (the server's) and their names in words. */
const NUMBERS = {
  admitPerSecond: [1, 100_000, 'Admitted per second'],
  maxActive: [1, 1_000_000, 'Live passes at most'],
  passTtlSecs: [10, 3_600, 'Pass valid for'],
  abandonAfterSecs: [10, 3_600, 'Place lost after'],
};

/** The item whose room the panel shows, or null. */
let chosen = null;
/** The room as stored when the form was filled (null until the first answer). */
let stored = null;
/** Sample slot (unix seconds ÷ STEP_S) → the room's `status` then. */
let samples = new Map();
let saving = false;

// --- the item --------------------------------------------------------------------------

/** Lists the items of the items table in the select, keeping the choice. */
function fillChoices() {
  const list = itemList();
  const want = list.map((item) => [String(item.id), `#${item.id} ${item.name}`]);
  if (chosen !== null && !want.some(([id]) => id === String(chosen))) {
    want.push([String(chosen), `#${chosen} ${itemName(chosen) || ''}`.trim()]);
  }
  const have = [...ui.select.options].slice(1).map((o) => [o.value, o.textContent]);
  if (JSON.stringify(have) === JSON.stringify(want)) return;
  ui.select.replaceChildren(
    el('option', { value: '', text: 'Choose an item' }),
    ...want.map(([value, text]) => el('option', { value, text })),
  );
  ui.select.value = chosen === null ? '' : String(chosen);
}

/** Shows item `id`'s room (null: none), with a fresh chart, and loads it. */
export function chooseRoom(id) {
  chosen = id;
  stored = null;
  samples = new Map();
  announce(ui.result, '');
  announce(ui.error, '');
  ui.changed.hidden = true;
  clearFieldErrors();
  fillChoices();
  ui.select.value = id === null ? '' : String(id);
  ui.body.hidden = id === null;
  ui.empty.hidden = id !== null;
  ui.form.setAttribute('aria-busy', 'true');
  for (const tile of [ui.waiting, ui.admittedMinute, ui.livePasses, ui.abandoned]) tile.textContent = '–';
  ui.totals.textContent = '';
  ui.closed.hidden = true;
  ui.updated.textContent = id === null ? '' : 'Loading…';
  ui.chart.replaceChildren();
  if (id !== null) sampleRoom();
}

// --- the figures -------------------------------------------------------------------------

/** One sample of the chosen room (the panel's poll): figures, chart, and the form once. */
export async function sampleRoom() {
  fillChoices();
  if (chosen === null) return;
  const id = chosen;
  const room = await loadPanel(`/admin/api/items/${id}/waiting-room`, ui.error, 'the waiting room');
  if (!room || id !== chosen) return;
  const status = room.status || {};
  samples.set(Math.floor(Date.now() / ROOM_SAMPLE_MS), status);
  showFigures(room, status);
  if (stored === null) fillForm(room);
  else if (room.version > stored.version && !saving) {
    ui.changedText.textContent = `Someone changed this waiting room (now version ${room.version}); the form still shows version ${stored.version}.`;
    ui.changed.hidden = false;
  }
}

function showFigures(room, status) {
  ui.waiting.textContent = formatNumber(status.waiting);
  ui.admittedMinute.textContent = formatNumber(status.admittedLastMinute);
  ui.livePasses.textContent = formatNumber(status.livePasses);
  ui.abandoned.textContent = formatNumber(status.abandoned);
  ui.totals.textContent =
    `${room.enabled ? 'On' : 'Off'}. Since the queue opened: ${formatNumber(status.joined)} joined; ` +
    `the first ${formatNumber(status.serving)} places reached (${formatNumber(status.admitted)} admitted, ` +
    `${formatNumber(status.abandoned)} abandoned).` +
    (status.soldOut && !status.closed ? ' Sold out: admissions wait for a unit to come back.' : '');
  showClosed(status);
  const last = Math.floor(Date.now() / ROOM_SAMPLE_MS);
  const first = last - POINTS + 1;
  const line = (key, label, pick) => ({
    key,
    label,
    values: Array.from({ length: POINTS }, (_, i) => {
      const s = samples.get(first + i);
      return s ? Number(pick(s)) || 0 : null;
    }),
  });
  for (const slot of samples.keys()) if (slot < first) samples.delete(slot);
  renderLineChart(ui.chart, {
    name: 'room',
    kind: 'level',
    title: `Waiting room of item ${chosen}, sampled every ${STEP_S} s (latest)`,
    from: first * STEP_S,
    step: STEP_S,
    lines: [
      line('waiting', 'Waiting', (s) => s.waiting),
      line('admitted_last_minute', 'Admitted last minute', (s) => s.admittedLastMinute),
      line('live_passes', 'Live passes', (s) => s.livePasses),
      line('abandoned', 'Abandoned (total)', (s) => s.abandoned),
    ],
  });
  ui.updated.textContent = `Updated ${formatTime(new Date())}`;
}

/** A room closed for good: when, and its final figures. */
function showClosed(status) {
  ui.closed.hidden = !status.closed;
  if (!status.closed) return;
  const at = Date.parse(status.closedAt);
  const item = itemOf(chosen);
  const bought = item && Number.isInteger(item.sold) ? `, ${formatNumber(item.sold)} bought` : '';
  ui.closed.textContent =
    `Closed: sold out at ${Number.isFinite(at) ? formatTime(new Date(at)) : '–'}, no unit can come back. ` +
    `Final figures: ${formatNumber(status.joined)} joined, ${formatNumber(status.admitted)} admitted, ` +
    `${formatNumber(status.abandoned)} abandoned${bought}. Raising the item’s stock reopens the queue.`;
}

// --- the settings ------------------------------------------------------------------------

function clearFieldErrors() {
  for (const input of Object.values(fields)) {
    if (input.type !== 'checkbox') fieldError(input, '');
  }
}

function showOrderHint() {
  const order = Object.values(RoomOrder).find((o) => o.word === fields.order.value);
  ui.orderHint.textContent = order ? order.hint : '';
}

/** Shows a stored room in the form. */
function fillForm(room) {
  stored = room;
  ui.form.setAttribute('aria-busy', 'false');
  ui.version.textContent = Number.isInteger(room.version) ? `version ${room.version}` : '';
  ui.changed.hidden = true;
  clearFieldErrors();
  fields.enabled.checked = Boolean(room.enabled);
  fields.order.value = room.order;
  showOrderHint();
  fields.prequeueStartsAt.value = room.prequeueStartsAt ? dateToLocalInput(new Date(room.prequeueStartsAt)) : '';
  fields.prequeueStartsAt.title = room.prequeueStartsAt ? formatDateTime(room.prequeueStartsAt) : '';
  for (const name of Object.keys(NUMBERS)) fields[name].value = String(room[name] ?? '');
  fields.message.value = room.message ?? '';
}

/** The PUT body the form describes, or the message of each field that is wrong. */
function readForm() {
  const errors = {};
  const body = { enabled: fields.enabled.checked, order: fields.order.value, message: fields.message.value.trim() };
  if (body.message.length > 200) errors.message = 'At most 200 characters.';
  // The input holds minutes: an unchanged one sends the stored instant as it is.
  const pre = fields.prequeueStartsAt.value;
  const storedPre = stored.prequeueStartsAt ? dateToLocalInput(new Date(stored.prequeueStartsAt)) : '';
  if (pre === storedPre) body.prequeueStartsAt = stored.prequeueStartsAt ?? null;
  else if (!pre) body.prequeueStartsAt = null;
  else {
    body.prequeueStartsAt = localInputToIso(pre);
    if (!body.prequeueStartsAt) errors.prequeueStartsAt = 'Enter a date and time, or leave it empty.';
  }
  for (const [name, [min, max, label]] of Object.entries(NUMBERS)) {
    const text = fields[name].value.trim();
    const n = Number(text);
    if (!/^\d+$/.test(text) || n < min || n > max) {
      errors[name] = `${label}: a whole number from ${formatNumber(min)} to ${formatNumber(max)}.`;
    } else {
      body[name] = n;
    }
  }
  return Object.keys(errors).length ? { errors } : { body };
}

async function save(event) {
  event.preventDefault();
  if (chosen === null || stored === null || saving) return;
  announce(ui.result, '');
  clearFieldErrors();
  const { body, errors } = readForm();
  if (errors) {
    const invalid = Object.keys(errors);
    for (const name of invalid) fieldError(fields[name], errors[name]);
    fields[invalid[0]].focus();
    return;
  }
  const id = chosen;
  saving = true;
  ui.save.disabled = true;
  const result = await adminApi(`/admin/api/items/${id}/waiting-room`, { method: 'PUT', body });
  saving = false;
  ui.save.disabled = false;
  if (id !== chosen) return;
  if (result.ok) {
    fillForm(result.data);
    const room = result.data;
    announce(
      ui.result,
      `Saved the waiting room of item ${id} (version ${room.version}): ${room.enabled ? 'on' : 'off'}, ` +
        `${formatNumber(room.admitPerSecond)} admitted a second, at most ${formatNumber(room.maxActive)} live passes.`,
      'ok',
    );
    sampleRoom();
    return;
  }
  if (result.status === 401) return;
  const input = fields[result.error.field];
  if (result.error.code === ErrorCode.VALIDATION_FAILED && input && input.type !== 'checkbox') {
    fieldError(input, sentence(result.error.message));
    announce(ui.result, 'Not saved: see the field marked above.', 'error');
    input.focus();
  } else {
    announce(ui.result, `Not saved: ${result.error.message}`, 'error');
  }
}

// --- wiring ------------------------------------------------------------------------------

fields.order.replaceChildren(
  ...Object.values(RoomOrder).map((order) => el('option', { value: order.word, text: order.label })),
);
fields.order.addEventListener('change', showOrderHint);
ui.select.addEventListener('change', () => chooseRoom(ui.select.value ? Number(ui.select.value) : null));
ui.form.addEventListener('submit', save);
ui.reload.addEventListener('click', async () => {
  stored = null;
  announce(ui.result, '');
  await sampleRoom();
  fields.enabled.focus();
});
// The items table's "Waiting room" buttons (items.js) name their item in data-room-item.
ui.itemRows.addEventListener('click', (event) => {
  const button = event.target.closest('[data-room-item]');
  if (!button) return;
  chooseRoom(Number(button.dataset.roomItem));
  byId('room-title').scrollIntoView({ block: 'start' });
  ui.select.focus({ preventScroll: true });
});
