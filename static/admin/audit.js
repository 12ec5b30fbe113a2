// The audit list: who changed which policy when, and what changed, newest first.
import { byId, el } from '../dom.js';
import { formatDateTime } from '../format.js';
import { SHAPER, scopeOf } from './policy.js';
import { loadPanel } from './session.js';

const ui = {
  policy: byId('audit-policy'),
  refresh: byId('audit-refresh'),
  list: byId('audit-list'),
  empty: byId('audit-empty'),
  error: byId('audit-error'),
};

/** A rule's key as stored: `ip`, `literal “checkout”`. */
function keyWords(key) {
  if (key && typeof key === 'object') return Object.entries(key).map(([kind, value]) => `${kind} “${value}”`).join(' ');
  return String(key);
}

/** A max delay: only leaky_bucket rules wait (every rule carries one). */
const delayWords = (ms) => (ms === undefined || ms === null ? 'default' : `${ms} ms`);
const modeWords = (rule) => (rule.shadow ? 'shadow' : 'enforced');

/** A rule that came with the new version: what it counts, what it allows, what it says. */
function addedRule(rule, algorithm) {
  const parts = [`key ${keyWords(rule.key)}`, `threshold ${rule.threshold}`, `window ${rule.windowMs} ms`];
  if (algorithm === SHAPER) parts.push(`max delay ${delayWords(rule.maxDelayMs)}`);
  parts.push(`message “${rule.message}”`);
  return `${rule.name}: added${rule.shadow ? ' as a shadow rule' : ''}, ${parts.join(', ')}`;
}

/** What changed in a rule that both versions have; empty when nothing did. */
function ruleChanges(was, rule) {
  const parts = [];
  if (keyWords(was.key) !== keyWords(rule.key)) parts.push(`key ${keyWords(was.key)} → ${keyWords(rule.key)}`);
  if (was.threshold !== rule.threshold) parts.push(`threshold ${was.threshold} → ${rule.threshold}`);
  if (was.windowMs !== rule.windowMs) parts.push(`window ${was.windowMs} ms → ${rule.windowMs} ms`);
  if (was.maxDelayMs !== rule.maxDelayMs) parts.push(`max delay ${delayWords(was.maxDelayMs)} → ${delayWords(rule.maxDelayMs)}`);
  if (modeWords(was) !== modeWords(rule)) parts.push(`${modeWords(was)} → ${modeWords(rule)}`);
  if (was.message !== rule.message) parts.push(`message “${was.message}” → “${rule.message}”`);
  return parts;
}

/**
 * One line per change between two versions of a policy: its settings, then its rules in
 * the new version's order (added ones in full), then the rules it no longer has.
 */
function describeChange(oldP, newP) {
  const lines = [];
  if (oldP.algorithm !== newP.algorithm) lines.push(`algorithm ${oldP.algorithm} → ${newP.algorithm}`);
  if (oldP.enabled !== newP.enabled) lines.push(newP.enabled ? 'enabled' : 'disabled');
  if (oldP.failMode !== newP.failMode) lines.push(`fail mode ${oldP.failMode} → ${newP.failMode}`);
  if (scopeOf(oldP) !== scopeOf(newP)) lines.push(`scope ${scopeOf(oldP)} → ${scopeOf(newP)}`);
  const before = new Map((oldP.rules || []).map((r) => [r.name, r]));
  const after = new Set((newP.rules || []).map((r) => r.name));
  for (const rule of newP.rules || []) {
    const was = before.get(rule.name);
    if (!was) {
      lines.push(addedRule(rule, newP.algorithm));
      continue;
    }
    const parts = ruleChanges(was, rule);
    if (parts.length) lines.push(`${rule.name}: ${parts.join(', ')}`);
  }
  for (const [name, was] of before) {
    if (!after.has(name)) lines.push(`${name}: removed${was.shadow ? ' (a shadow rule)' : ''}`);
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
