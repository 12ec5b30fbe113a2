// One policy's form in the rules editor: built from the policy, filled from a stored
// version, and read back as the change to send. The panel (policies.js) loads and saves.
import { el, fieldError } from '../dom.js';
import { formatNumber } from '../format.js';
import { ALGORITHMS, SCOPES, scopeOf } from './policy.js';

/** A rule's key in words: "user id", "shared “checkout”". */
function keyText(key) {
  if (typeof key === 'string') return key.replace('_', ' ');
  if (key && typeof key === 'object') {
    const [kind, value] = Object.entries(key)[0] || [];
    return kind === 'literal' ? `shared “${value}”` : `${kind} ${value ?? ''}`.trim();
  }
  return String(key);
}

/** What a window and threshold allow: "3 per 60 s". */
function quotaText(windowMs, threshold) {
  const w = Number(windowMs);
  const t = Number(threshold);
  if (!Number.isFinite(w) || !Number.isFinite(t) || w <= 0) return '–';
  const span = w % 1000 === 0 ? `${formatNumber(w / 1000)} s` : `${formatNumber(w)} ms`;
  return `${formatNumber(t)} per ${span}`;
}

function showScopeHint(refs) {
  refs.scopeHint.textContent = SCOPES[refs.scope.value]?.hint || '';
}

/** The scope's own error line (the form may not be in the page yet: no lookup by id). */
export function scopeError(refs, message) {
  fieldError(refs.scope, message, refs.scopeError);
}

/** Every input of a rule's row. */
export const ruleInputs = (r) => [r.windowMs, r.threshold, r.message];

const RULE_COLUMNS = ['Rule', 'Key', 'Window (ms)', 'Threshold', 'Allows', 'Message when refused'];

/** A rule's row: its inputs (labelled for screen readers) and what they allow. */
function ruleRow(rule, idOf, refs) {
  const rslug = rule.name.replace(/[^A-Za-z0-9_-]/g, '-');
  const rid = (f) => idOf(`${rslug}-${f}`);
  const r = {};
  const labelled = (field, text, input) => [
    el('label', { for: rid(field), class: 'visually-hidden', text: `${text} of rule ${rule.name}` }),
    input,
  ];
  const number = (field) =>
    el('input', {
      id: rid(field), type: 'number', min: '1', step: '1', inputmode: 'numeric', class: 'num-input',
      'aria-describedby': refs.error.id,
    });
  r.windowMs = number('windowMs');
  r.threshold = number('threshold');
  r.message = el('input', { id: rid('message'), type: 'text', 'aria-describedby': refs.error.id });
  r.quota = el('span', { class: 'muted small' });
  const updateQuota = () => {
    r.quota.textContent = quotaText(r.windowMs.value, r.threshold.value);
  };
  r.windowMs.addEventListener('input', updateQuota);
  r.threshold.addEventListener('input', updateQuota);
  r.updateQuota = updateQuota;
  refs.rules.set(rule.name, r);
  return el(
    'tr',
    { dataset: { rule: rule.name } },
    el('th', { scope: 'row', text: rule.name }),
    el('td', { class: 'small', 'data-label': 'Key', text: keyText(rule.key) }),
    el('td', { 'data-label': 'Window (ms)' }, ...labelled('windowMs', 'Window (ms)', r.windowMs)),
    el('td', { 'data-label': 'Threshold' }, ...labelled('threshold', 'Threshold', r.threshold)),
    el('td', { 'data-label': 'Allows' }, r.quota),
    el('td', { class: 'message-cell', 'data-label': 'Message when refused' }, ...labelled('message', 'Message', r.message)),
  );
}

/**
 * Builds a policy's form; returns its element references (`form`, `save`, `error`,
 * `result`, `scope`, `rules`: rule name → its inputs, …). `onSave` runs on submit.
 */
export function renderPolicy(policy, onSave) {
  const slug = policy.name.replace(/[^A-Za-z0-9_-]/g, '-');
  const refs = { rules: new Map() };
  const idOf = (part) => `policy-${slug}-${part}`;
  const options = (words, labelOf) =>
    Object.entries(words).map(([value, w]) => el('option', { value, text: labelOf(w) }));

  refs.algorithm = el('select', { id: idOf('algorithm'), name: 'algorithm' }, options(ALGORITHMS, (label) => label));
  refs.enabled = el('input', { id: idOf('enabled'), type: 'checkbox', name: 'enabled' });
  refs.scopeHint = el('p', { id: idOf('scope-hint'), class: 'small muted scope-hint' });
  refs.scopeError = el('p', { id: idOf('scope-error'), class: 'field-error', hidden: true });
  refs.scope = el(
    'select',
    { id: idOf('scope'), name: 'scope', 'aria-describedby': `${refs.scopeHint.id} ${refs.scopeError.id}` },
    options(SCOPES, (scope) => scope.label),
  );
  refs.scope.addEventListener('change', () => showScopeHint(refs));
  refs.error = el('p', { id: idOf('error'), class: 'field-error', role: 'alert', hidden: true });
  refs.result = el('p', { class: 'notice', role: 'status', 'aria-live': 'polite', hidden: true });
  refs.save = el('button', { type: 'submit', class: 'button button-primary', text: `Save ${policy.name}` });
  const rows = policy.rules.map((rule) => ruleRow(rule, idOf, refs));

  refs.failMode = el('span', { class: 'badge badge-sold-out' });
  refs.version = el('span', { class: 'muted small' });
  refs.form = el(
    'form',
    { class: 'policy', novalidate: true, dataset: { policy: policy.name } },
    el(
      'fieldset',
      {},
      el('legend', {}, 'Policy ', el('strong', { text: policy.name }), ' ', refs.version),
      el(
        'div',
        { class: 'policy-settings' },
        el('div', { class: 'field field-narrow' }, el('label', { for: refs.algorithm.id, text: 'Algorithm' }), refs.algorithm),
        el('div', { class: 'checkbox-field' }, refs.enabled, el('label', { for: refs.enabled.id, text: 'Enabled' })),
        el('p', { class: 'small muted' }, 'When Redis is down: ', refs.failMode),
      ),
      el(
        'div',
        { class: 'field scope-field' },
        el('label', { for: refs.scope.id, text: 'Scope' }),
        el('div', { class: 'scope-control' }, refs.scope, refs.scopeHint),
        refs.scopeError,
      ),
      el(
        'div',
        { class: 'table-wrap' },
        el(
          'table',
          { class: 'table rules-table stack-on-phone' },
          el('caption', { class: 'visually-hidden', text: `Rules of policy ${policy.name}` }),
          el('thead', {}, el('tr', {}, RULE_COLUMNS.map((text) => el('th', { scope: 'col', text })))),
          el('tbody', {}, rows),
        ),
      ),
      refs.error,
      el('div', { class: 'form-actions' }, refs.save, refs.result),
    ),
  );
  refs.form.addEventListener('submit', (event) => {
    event.preventDefault();
    onSave();
  });
  return refs;
}

/** Shows a stored version of the policy in its form. */
export function fillPolicy(refs, policy) {
  refs.version.textContent = Number.isInteger(policy.version) ? `version ${policy.version}` : '';
  refs.algorithm.value = policy.algorithm;
  refs.enabled.checked = Boolean(policy.enabled);
  refs.scope.value = scopeOf(policy);
  scopeError(refs, '');
  showScopeHint(refs);
  refs.failMode.textContent = policy.failMode === 'closed' ? 'refuse (fail closed)' : 'allow (fail open)';
  for (const rule of policy.rules) {
    const r = refs.rules.get(rule.name);
    if (!r) continue;
    r.windowMs.value = String(rule.windowMs);
    r.threshold.value = String(rule.threshold);
    r.message.value = rule.message;
    for (const input of ruleInputs(r)) input.removeAttribute('aria-invalid');
    r.updateQuota();
  }
}

/**
 * What changed in the form against `policy`: `{ body }` (the PUT body, null when
 * nothing did) or `{ problems: [[input, message], …] }`.
 */
export function policyChange(policy, refs) {
  const body = { rules: [] };
  const problems = [];
  if (refs.algorithm.value !== policy.algorithm) body.algorithm = refs.algorithm.value;
  if (refs.enabled.checked !== Boolean(policy.enabled)) body.enabled = refs.enabled.checked;
  if (refs.scope.value !== scopeOf(policy)) body.scope = refs.scope.value;
  for (const rule of policy.rules) {
    const r = refs.rules.get(rule.name);
    const change = { name: rule.name };
    for (const field of ['windowMs', 'threshold']) {
      const text = r[field].value.trim();
      if (!/^\d+$/.test(text)) {
        problems.push([r[field], `${field === 'windowMs' ? 'Window' : 'Threshold'} of rule ${rule.name} must be a whole number.`]);
        continue;
      }
      if (Number(text) !== Number(rule[field])) change[field] = Number(text);
    }
    if (r.message.value !== rule.message) change.message = r.message.value;
    if (Object.keys(change).length > 1) body.rules.push(change);
  }
  if (problems.length) return { problems };
  const changed = body.rules.length > 0 || 'algorithm' in body || 'enabled' in body || 'scope' in body;
  return changed ? { body } : { body: null };
}
