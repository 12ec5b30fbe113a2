// The offenders panel: the top 20 refused users and addresses of the last minute or hour
// (one item or all), each with its refusals by dimension and its label, a Block action
// per row (for a chosen time, with a reason), and the blocks in force with Unblock.
// Blocking an address labelled as shared asks first: honest shoppers stand behind it.
import { announce, byId, confirmDialog, el, fieldError } from '../dom.js';
import { formatDateTime, formatNumber } from '../format.js';
import { OffenderLabel, offenderLabel } from '../words.js';
import { adminApi, loadPanel, signedIn } from './session.js';

const ui = {
  form: byId('offenders-form'),
  window: byId('offenders-window'),
  item: byId('offenders-item'),
  span: byId('offenders-span'),
  error: byId('offenders-error'),
  notice: byId('offenders-notice'),
  users: byId('offender-user-rows'),
  addresses: byId('offender-ip-rows'),
  usersEmpty: byId('offender-users-empty'),
  addressesEmpty: byId('offender-ips-empty'),
  blockForm: byId('block-form'),
  blockTarget: byId('block-target'),
  blockSeconds: byId('block-seconds'),
  blockReason: byId('block-reason'),
  blockCancel: byId('block-cancel'),
  blocks: byId('block-rows'),
  blocksEmpty: byId('blocks-empty'),
};

/** The row being blocked: { kind, value, label }. */
let chosen = null;

const dimensionsText = (dimensions) =>
  Object.entries(dimensions || {})
    .map(([name, n]) => `${name} ${formatNumber(n)}`)
    .join(' · ') || '–';

function labelCell(spelling) {
  const text = offenderLabel(spelling);
  return el('td', {}, text ? el('span', { class: `badge badge-offender badge-${spelling}`, text }) : '–');
}

function offenderRow(kind, value, o) {
  return el(
    'tr',
    { dataset: { kind, value } },
    el('th', { scope: 'row', text: value }),
    el('td', { class: 'num', text: formatNumber(o.refusals) }),
    el('td', { text: dimensionsText(o.dimensions) }),
    labelCell(o.label),
    el(
      'td',
      {},
      el('button', {
        type: 'button',
        class: 'button button-small',
        text: 'Block…',
        'aria-label': `Block ${kind === 'ip' ? 'address' : 'user'} ${value}`,
        onclick: () => chooseBlock(kind, value, o.label),
      }),
    ),
  );
}

export async function loadOffenders() {
  const item = ui.item.value.trim();
  fieldError(ui.item, '');
  if (item && !/^\d+$/.test(item)) {
    fieldError(ui.item, 'Enter an item id, or leave it empty for all items.');
    return;
  }
  const query = `?window=${ui.window.value}${item ? `&item=${item}` : ''}`;
  const data = await loadPanel(`/admin/api/offenders${query}`, ui.error, 'the offenders');
  if (!data) return;
  const users = Array.isArray(data.users) ? data.users : [];
  const addresses = Array.isArray(data.addresses) ? data.addresses : [];
  ui.users.replaceChildren(...users.map((u) => offenderRow('user', String(u.id), u)));
  ui.addresses.replaceChildren(...addresses.map((a) => offenderRow('ip', a.ip, a)));
  ui.usersEmpty.hidden = users.length > 0;
  ui.addressesEmpty.hidden = addresses.length > 0;
  ui.span.textContent = `${formatDateTime(data.from)} – ${formatDateTime(data.to)}`;
}

function chooseBlock(kind, value, label) {
  chosen = { kind, value, label };
  ui.blockTarget.textContent = `${kind === 'ip' ? 'Address' : 'User'} ${value}${label ? ` (${offenderLabel(label)})` : ''}`;
  ui.blockForm.hidden = false;
  ui.blockReason.focus();
}

function closeBlock() {
  chosen = null;
  ui.blockForm.hidden = true;
  ui.blockReason.value = '';
  fieldError(ui.blockReason, '');
}

async function submitBlock(event) {
  event.preventDefault();
  if (!chosen) return;
  const target = chosen;
  if (target.kind === 'ip' && target.label === OffenderLabel.SHARED_ADDRESS.word) {
    const sure = await confirmDialog({
      title: `Block the shared address ${target.value}?`,
      text: 'This address is labelled as shared: many shoppers, each at a low rate, stand behind it (an office or a mobile carrier’s NAT). Blocking it refuses every one of them, honest shoppers included, until the block ends.',
      yes: 'Block everyone behind it',
    });
    if (!sure) return;
  }
  const seconds = Number(ui.blockSeconds.value);
  const result = await adminApi('/admin/api/blocks', {
    method: 'POST',
    body: { kind: target.kind, value: target.value, seconds, reason: ui.blockReason.value.trim() },
  });
  if (!signedIn()) return;
  if (!result.ok) {
    if (result.error.field === 'reason') fieldError(ui.blockReason, result.error.message);
    else announce(ui.notice, `Could not block ${target.value}: ${result.error.message}`, 'error');
    return;
  }
  const late = result.data.unconfirmed || [];
  announce(
    ui.notice,
    late.length
      ? `Blocked ${result.data.block.value}; ${late.length} instance(s) had not confirmed it yet.`
      : `Blocked ${result.data.block.value} on every instance until ${formatDateTime(result.data.block.until)}.`,
    late.length ? 'warn' : 'ok',
  );
  closeBlock();
  loadBlocks();
}

function blockRow(b) {
  return el(
    'tr',
    { dataset: { kind: b.kind, value: b.value } },
    el('td', { text: b.kind === 'ip' ? 'Address' : 'User' }),
    el('th', { scope: 'row', text: b.value }),
    el('td', { text: formatDateTime(b.until) }),
    el('td', { text: b.reason || '–' }),
    el('td', { text: b.createdBy }),
    el(
      'td',
      {},
      el('button', {
        type: 'button',
        class: 'button button-small',
        text: 'Unblock',
        'aria-label': `Unblock ${b.value}`,
        onclick: () => unblock(b),
      }),
    ),
  );
}

export async function loadBlocks() {
  const data = await loadPanel('/admin/api/blocks', ui.error, 'the blocks');
  if (!data) return;
  const blocks = Array.isArray(data.blocks) ? data.blocks : [];
  ui.blocks.replaceChildren(...blocks.map(blockRow));
  ui.blocksEmpty.hidden = blocks.length > 0;
}

async function unblock(b) {
  const path = `/admin/api/blocks/${encodeURIComponent(b.kind)}/${encodeURIComponent(b.value)}`;
  const result = await adminApi(path, { method: 'DELETE' });
  if (!signedIn()) return;
  if (!result.ok) {
    announce(ui.notice, `Could not unblock ${b.value}: ${result.error.message}`, 'error');
  } else {
    announce(ui.notice, `Unblocked ${b.value}.`, 'ok');
  }
  loadBlocks();
}

ui.form.addEventListener('submit', (event) => {
  event.preventDefault();
  loadOffenders();
});
ui.window.addEventListener('change', loadOffenders);
ui.blockForm.addEventListener('submit', submitBlock);
ui.blockCancel.addEventListener('click', closeBlock);
