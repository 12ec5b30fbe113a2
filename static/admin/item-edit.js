// An item's edit form, in a dialog over the items table: name, price, end of the sale
// and stock. Only the fields changed are sent (PATCH); the server's refusal of a field
// shows next to it (a stock below what is sold or held says how low it may go).
import { announce, el, fieldError } from '../dom.js';
import { dateToLocalInput, formatNumber, formatPrice, localInputToIso, sentence } from '../format.js';
import { ErrorCode } from '../words.js';
import { adminApi } from './session.js';

/** An input with its label, an optional hint and its error line, ids under `edit-`. */
function field(name, label, input, hint) {
  const id = `edit-${name}`;
  Object.assign(input, { id, name });
  const hintId = `${id}-hint`;
  const errorId = `${id}-error`;
  input.setAttribute('aria-describedby', hint ? `${hintId} ${errorId}` : errorId);
  return el(
    'div',
    { class: 'field' },
    el('label', { for: id, text: label }),
    input,
    hint ? el('p', { id: hintId, class: 'small muted', text: hint }) : null,
    el('p', { id: errorId, class: 'field-error', hidden: true }),
  );
}

/** What the form says the item should become: the changed fields, or their errors. */
function readChanges(item, inputs, initialEnd) {
  const errors = {};
  const body = {};
  const name = inputs.name.value.trim();
  if (!name) errors.name = 'Give the item a name.';
  else if (name !== item.name) body.name = name;

  const priceText = inputs.priceCents.value.trim();
  if (!/^\d+(\.\d{1,2})?$/.test(priceText)) {
    errors.priceCents = 'Enter a price of 0 or more, with at most two decimals.';
  } else {
    const cents = Math.round(Number(priceText) * 100);
    if (cents !== Number(item.priceCents)) body.priceCents = cents;
  }

  if (inputs.endsAt.value !== initialEnd) {
    const endsAt = localInputToIso(inputs.endsAt.value);
    if (!endsAt) errors.endsAt = 'Choose when the sale ends.';
    else body.endsAt = endsAt;
  }

  const stockText = inputs.stock.value.trim();
  if (!/^\d+$/.test(stockText)) {
    errors.stock = 'Enter the total stock: a whole number of units.';
  } else if (Number(stockText) !== Number(item.totalStock)) {
    body.stock = Number(stockText);
  }
  return { body, errors };
}

/**
 * Opens the edit form of `item`. Resolves to the item as stored after a save, or null
 * when the form was closed without one.
 */
export function editItem(item) {
  return new Promise((resolve) => {
    const sold = Number(item.sold) || 0;
    const inputs = {
      name: el('input', { type: 'text', required: true, maxlength: '200', autocomplete: 'off' }),
      priceCents: el('input', { type: 'number', min: '0', step: '0.01', inputmode: 'decimal', required: true }),
      endsAt: el('input', { type: 'datetime-local', required: true }),
      stock: el('input', { type: 'number', min: String(Math.max(0, sold)), step: '1', inputmode: 'numeric', required: true }),
    };
    inputs.name.value = item.name;
    inputs.priceCents.value = (Number(item.priceCents) / 100).toFixed(2);
    const initialEnd = dateToLocalInput(new Date(item.endsAt));
    inputs.endsAt.value = initialEnd;
    inputs.stock.value = String(item.totalStock);

    const result = el('p', { class: 'notice', role: 'status', 'aria-live': 'polite', hidden: true });
    const save = el('button', { type: 'submit', class: 'button button-primary', text: 'Save changes' });
    const close = el('button', { type: 'button', class: 'button', text: 'Close' });
    const zone = Intl.DateTimeFormat().resolvedOptions().timeZone || 'local time';
    const form = el(
      'form',
      { class: 'stack-form', novalidate: true },
      field('name', 'Name', inputs.name),
      el(
        'div',
        { class: 'field-row' },
        field('priceCents', 'Price', inputs.priceCents, `Now ${formatPrice(item.priceCents)}.`),
        field(
          'stock',
          'Total stock',
          inputs.stock,
          `${formatNumber(item.remainingStock)} left; at least ${formatNumber(sold)}: the units sold or held by unpaid orders.`,
        ),
      ),
      field('endsAt', 'Sale ends', inputs.endsAt, `In your time zone (${zone}). A time in the past ends the sale.`),
      el('div', { class: 'dialog-actions' }, close, save),
      result,
    );
    const dialog = el(
      'dialog',
      { class: 'dialog edit-dialog', 'aria-labelledby': 'edit-title' },
      el('h2', { id: 'edit-title', text: `Edit item ${item.id}: ${item.name}` }),
      form,
    );

    let saved = null;
    close.addEventListener('click', () => dialog.close());
    dialog.addEventListener('close', () => {
      dialog.remove();
      resolve(saved);
    });
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      announce(result, '');
      for (const input of Object.values(inputs)) fieldError(input, '');
      const { body, errors } = readChanges(item, inputs, initialEnd);
      const wrong = Object.keys(errors);
      if (wrong.length) {
        for (const name of wrong) fieldError(inputs[name], errors[name]);
        inputs[wrong[0]].focus();
        return;
      }
      if (Object.keys(body).length === 0) {
        announce(result, 'Nothing to save: no field was changed.', 'info');
        return;
      }
      save.disabled = true;
      const answer = await adminApi(`/admin/api/items/${item.id}`, { method: 'PATCH', body });
      save.disabled = false;
      if (answer.ok) {
        saved = answer.data;
        dialog.close();
        return;
      }
      if (answer.status === 401) {
        dialog.close();
        return;
      }
      const { code, message } = answer.error;
      const input = inputs[answer.error.field];
      if (code === ErrorCode.STOCK_TOO_LOW) {
        const min = Number(answer.error.minStock);
        fieldError(
          inputs.stock,
          Number.isFinite(min)
            ? `At least ${formatNumber(min)}: that many units are sold or held by unpaid orders.`
            : sentence(message),
        );
        if (Number.isFinite(min)) inputs.stock.min = String(min);
        inputs.stock.focus();
      } else if (code === ErrorCode.VALIDATION_FAILED && input) {
        fieldError(input, sentence(message));
        input.focus();
      } else if (code === ErrorCode.ITEM_ARCHIVED) {
        announce(result, 'Not saved: this item is archived, and an archived item cannot be changed.', 'error');
      } else if (code === ErrorCode.EDIT_IN_PROGRESS) {
        announce(result, 'Not saved: another change of this item’s stock is running. Save again in a moment.', 'warn');
      } else if (code === ErrorCode.ITEM_NOT_FOUND) {
        announce(result, 'Not saved: this item no longer exists.', 'error');
      } else {
        announce(result, `Not saved: ${message}`, 'error');
      }
    });

    document.body.append(dialog);
    dialog.showModal();
    inputs.name.focus();
  });
}
