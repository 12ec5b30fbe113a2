// The create-an-item form: checked here first, then by the server, whose refusal of a
// field shows next to that field.
import { announce, byId, fieldError } from '../dom.js';
import { dateToLocalInput, formatNumber, localInputToIso } from '../format.js';
import { ErrorCode } from '../words.js';
import { addItem, loadItems } from './items.js';
import { adminApi } from './session.js';

const ui = {
  form: byId('create-form'),
  button: byId('create-button'),
  result: byId('create-result'),
  tzHint: byId('tz-hint'),
};

/** The form's inputs by the API's field names (a refusal's `field`). */
const fields = {
  name: byId('item-name'),
  priceCents: byId('item-price'),
  stock: byId('item-stock'),
  startsAt: byId('item-starts'),
  endsAt: byId('item-ends'),
};

function resetDefaults() {
  const now = new Date();
  now.setSeconds(0, 0);
  fields.startsAt.value = dateToLocalInput(now);
  fields.endsAt.value = dateToLocalInput(new Date(now.getTime() + 60 * 60 * 1000));
}

/** The item the form describes, or the message of each field that is wrong. */
function readForm() {
  const errors = {};
  const name = fields.name.value.trim();
  if (!name) errors.name = 'Give the item a name.';
  const priceText = fields.priceCents.value.trim();
  const price = Number(priceText);
  if (priceText === '' || !Number.isFinite(price) || price < 0 || !/^\d+(\.\d{1,2})?$/.test(priceText)) {
    errors.priceCents = 'Enter a price of 0 or more, with at most two decimals.';
  }
  const stockText = fields.stock.value.trim();
  const stock = Number(stockText);
  if (!/^\d+$/.test(stockText) || stock < 1) errors.stock = 'Enter a stock of 1 or more units.';
  const startsAt = localInputToIso(fields.startsAt.value);
  const endsAt = localInputToIso(fields.endsAt.value);
  if (!startsAt) errors.startsAt = 'Choose when the sale starts.';
  if (!endsAt) errors.endsAt = 'Choose when the sale ends.';
  if (Object.keys(errors).length) return { errors };
  return { item: { name, priceCents: Math.round(price * 100), stock, startsAt, endsAt } };
}

async function submit(event) {
  event.preventDefault();
  announce(ui.result, '');
  for (const input of Object.values(fields)) fieldError(input, '');

  const { item: body, errors } = readForm();
  if (errors) {
    const invalid = Object.keys(errors);
    for (const field of invalid) fieldError(fields[field], errors[field]);
    fields[invalid[0]].focus();
    return;
  }

  ui.button.disabled = true;
  const result = await adminApi('/admin/api/items', { method: 'POST', body });
  ui.button.disabled = false;
  if (result.ok) {
    const item = result.data;
    announce(ui.result, `Created item ${item.id}: ${item.name} (${formatNumber(item.totalStock)} units).`, 'ok');
    fields.name.value = '';
    addItem(item);
    loadItems();
    return;
  }
  if (result.status === 401) return;
  const input = fields[result.error.field];
  if (result.error.code === ErrorCode.VALIDATION_FAILED && input) {
    fieldError(input, result.error.message);
    input.focus();
  } else {
    announce(ui.result, `Could not create the item: ${result.error.message}`, 'error');
  }
}

ui.tzHint.textContent = `Times are in your time zone (${
  Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time'
}).`;
resetDefaults();
ui.form.addEventListener('submit', submit);
