// The audit list: who changed which policy when, and what changed, newest first.
import { byId, el } from '../dom.js';
import { formatDateTime } from '../format.js';
import { scopeOf } from './policy.js';
import { loadPanel } from './session.js';

const ui = {
  policy: byId('audit-policy'),
  refresh: byId('audit-refresh'),
  list: byId('audit-list'),
  empty: byId('audit-empty'),
  error: byId('audit-error'),
};

/** One line per change between two versions of a policy. */
function describeChange(oldP, newP) {
  const lines = [];
  if (oldP.algorithm !== newP.algorithm) lines.push(`algorithm ${oldP.algorithm} → ${newP.algorithm}`);
  if (oldP.enabled !== newP.enabled) lines.push(newP.enabled ? 'enabled' : 'disabled');
  if (oldP.failMode !== newP.failMode) lines.push(`fail mode ${oldP.failMode} → ${newP.failMode}`);
  if (scopeOf(oldP) !== scopeOf(newP)) lines.push(`scope ${scopeOf(oldP)} → ${scopeOf(newP)}`);
  const before = new Map((oldP.rules || []).map((r) => [r.name, r]));
  for (const rule of newP.rules || []) {
    const was = before.get(rule.name);
    if (!was) {
      lines.push(`${rule.name}: added`);
      continue;
    }
    const parts = [];
    if (was.threshold !== rule.threshold) parts.push(`threshold ${was.threshold} → ${rule.threshold}`);
    if (was.windowMs !== rule.windowMs) parts.push(`window ${was.windowMs} ms → ${rule.windowMs} ms`);
    if (was.message !== rule.message) parts.push(`message “${was.message}” → “${rule.message}”`);
    if (parts.length) lines.push(`${rule.name}: ${parts.join(', ')}`);
  }
  return lines.length ? lines : ['no effective change'];
}

function entryItem(e) {
  return el(
    'li',
    { class: 'audit-entry' },
    el(
      'p',
      { class: 'audit-head' },
      el('strong', { text: e.policy }),
      ` changed by ${e.changedBy} · `,
      el('time', { datetime: e.changedAt, class: 'muted', text: formatDateTime(e.changedAt) }),
    ),
    el('ul', { class: 'audit-changes' }, describeChange(e.old, e.new).map((line) => el('li', { text: line }))),
  );
}

export async function loadAudit() {
  const policy = ui.policy.value;
  const query = policy ? `?policy=${encodeURIComponent(policy)}` : '';
  const data = await loadPanel(`/admin/api/audit${query}`, ui.error, 'the changes');
  if (!data) return;
  const entries = Array.isArray(data.entries) ? data.entries : [];
  ui.list.replaceChildren(...entries.map(entryItem));
  ui.empty.hidden = entries.length > 0;
}

/** The policies the list can be narrowed to; the choice stays if it is still there. */
export function showPolicyChoices(names) {
  const chosen = ui.policy.value;
  ui.policy.replaceChildren(
    el('option', { value: '', text: 'All policies' }),
    ...names.map((name) => el('option', { value: name, text: name })),
  );
  ui.policy.value = chosen;
}

ui.policy.addEventListener('change', loadAudit);
ui.refresh.addEventListener('click', loadAudit);
