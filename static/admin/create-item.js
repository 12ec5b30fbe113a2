// The create-an-item form: checked here first, then by the server, whose refusal of a
// field shows next to that field. Its "Waiting room" fieldset (off by default) sends the
// item's room with it (`waitingRoom`): the item and its room are made in one request.
import { announce, byId, el, fieldError } from '../dom.js';
import { dateToLocalInput, formatNumber, localInputToIso } from '../format.js';
import { ErrorCode, RoomOrder } from '../words.js';
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
  'waitingRoom.order': byId('create-room-order'),
  'waitingRoom.admitPerSecond': byId('create-room-admit'),
  'waitingRoom.passTtlSecs': byId('create-room-pass'),
  'waitingRoom.prequeueStartsAt': byId('create-room-prequeue'),
};

const room = {
  enabled: byId('create-room-enabled'),
  fields: byId('create-room-fields'),
  orderHint: byId('create-room-order-hint'),
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
  const waitingRoom = readRoom(errors);
  if (Object.keys(errors).length) return { errors };
  const item = { name, priceCents: Math.round(price * 100), stock, startsAt, endsAt };
  if (waitingRoom) item.waitingRoom = waitingRoom;
  return { item };
}

/** The item's waiting room as the form sets it (null when off), its errors in `errors`. */
function readRoom(errors) {
  if (!room.enabled.checked) return null;
  const waitingRoom = { enabled: true, order: fields['waitingRoom.order'].value };
  const admitText = fields['waitingRoom.admitPerSecond'].value.trim();
  const admit = Number(admitText);
  if (!/^\d+$/.test(admitText) || admit < 1 || admit > 100_000) {
    errors['waitingRoom.admitPerSecond'] = 'Admitted per second: a whole number from 1 to 100,000.';
  } else waitingRoom.admitPerSecond = admit;
  const passText = fields['waitingRoom.passTtlSecs'].value.trim();
  const pass = Number(passText);
  if (!/^\d+$/.test(passText) || pass < 1 || pass > 60) {
    errors['waitingRoom.passTtlSecs'] = 'Pass valid for: a whole number of minutes from 1 to 60.';
  } else waitingRoom.passTtlSecs = pass * 60;
  const pre = fields['waitingRoom.prequeueStartsAt'].value;
  if (pre) {
    waitingRoom.prequeueStartsAt = localInputToIso(pre);
    if (!waitingRoom.prequeueStartsAt) {
      errors['waitingRoom.prequeueStartsAt'] = 'Enter a date and time, or leave it empty.';
    }
  }
  return waitingRoom;
}

function showRoomFields() {
  room.fields.hidden = !room.enabled.checked;
}

function showOrderHint() {
  const order = Object.values(RoomOrder).find((o) => o.word === fields['waitingRoom.order'].value);
  room.orderHint.textContent = order ? order.hint : '';
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
    const queued = body.waitingRoom ? ', through its waiting room' : '';
    announce(ui.result, `Created item ${item.id}: ${item.name} (${formatNumber(item.totalStock)} units${queued}).`, 'ok');
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
fields['waitingRoom.order'].replaceChildren(
  ...Object.values(RoomOrder).map((order) => el('option', { value: order.word, text: order.label })),
);
fields['waitingRoom.order'].addEventListener('change', showOrderHint);
showOrderHint();
room.enabled.addEventListener('change', showRoomFields);
showRoomFields();
resetDefaults();
ui.form.addEventListener('submit', submit);
