// One policy's card in the rules editor: its form (settings and one row per rule), built
// from the policy, filled from a stored version, and read back as the change to send,
// with the form that adds a rule (rule-add.js) under it. The panel (policies.js) loads,
// saves, adds and removes.
import { el, fieldError, keepInOrder } from '../dom.js';
import { formatNumber } from '../format.js';
import { ALGORITHMS, FAIL_MODES, FIXED_RULES, KEY_SOURCES, LITERAL, MAX_DELAY_MS, SCOPES, SHAPER, scopeOf } from './policy.js';
import { errorLine, options, wholeNumber } from './policy-fields.js';
import { addRuleForm, newRuleInput, showMaxDelay, showRoom } from './rule-add.js';

export { newRule, resetNewRule } from './rule-add.js';

/** A rule's key in words: "User id", "shared “checkout”". */
function keyText(key) {
  if (typeof key === 'string') return KEY_SOURCES[key]?.label || key.replace('_', ' ');
  if (key && typeof key === 'object') {
    const [kind, value] = Object.entries(key)[0] || [];
    return kind === LITERAL ? `shared “${value}”` : `${kind} ${value ?? ''}`.trim();
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

const slugOf = (name) => name.replace(/[^A-Za-z0-9_-]/g, '-');

/**
 * A select of the policy (algorithm, fail mode, scope): its message in its error line,
 * or clears both (the form may not be in the page yet: no lookup by id).
 */
export function settingError(refs, setting, message) {
  fieldError(refs[setting], message, refs.errors.get(refs[setting]));
}

/** Every input of a rule's row. */
export const ruleInputs = (r) => [r.windowMs, r.threshold, r.maxDelayMs, r.shadow, r.message];

/** An input of the policy's form or of its add-rule form: its message, or clears it. */
export function inputError(refs, input, message) {
  const box = refs.errors.get(input) || refs.add?.errors.get(input);
  if (box) fieldError(input, message, box);
  else if (message) input.setAttribute('aria-invalid', 'true');
  else input.removeAttribute('aria-invalid');
}

/** Clears every field's error mark and line in the card. */
export function clearErrors(refs) {
  for (const map of [refs.errors, refs.add?.errors]) {
    for (const [input, box] of map || []) fieldError(input, '', box);
  }
  for (const r of refs.rules.values()) {
    for (const input of ruleInputs(r)) input.removeAttribute('aria-invalid');
  }
}

const RULE_COLUMNS = [
  ['Rule'],
  ['Key'],
  ['Window (ms)'],
  ['Threshold'],
  ['Allows'],
  ['Max delay (ms)', 'shaper-col'],
  ['Shadow'],
  ['Message when refused'],
];

/** A rule's row: its inputs (labelled for screen readers), what they allow, Remove. */
function ruleRow(rule, idOf, refs, onRemove) {
  const rid = (f) => idOf(`${slugOf(rule.name)}-${f}`);
  const r = { name: rule.name };
  /** A cell with an input, its label ("Threshold of rule user") and its error line. */
  const cell = (label, input, { dataLabel = label, cls, text = `${label} of rule ${rule.name}` } = {}) => {
    const box = errorLine(input);
    refs.errors.set(input, box);
    input.setAttribute('aria-describedby', `${box.id} ${refs.error.id}`);
    return el(
      'td',
      { 'data-label': dataLabel, class: cls },
      el('label', { for: input.id, class: 'visually-hidden', text }),
      input,
      box,
    );
  };
  const number = (field, min = '1') =>
    el('input', { id: rid(field), type: 'number', min, step: '1', inputmode: 'numeric', class: 'num-input' });
  r.windowMs = number('windowMs');
  r.threshold = number('threshold');
  r.maxDelayMs = number('maxDelayMs', '0');
  r.maxDelayMs.max = String(MAX_DELAY_MS);
  // A small intrinsic width: the cell, not the input, decides how wide it is.
  r.message = el('input', { id: rid('message'), type: 'text', size: '12' });
  r.shadow = el('input', { id: rid('shadow'), type: 'checkbox' });
  r.badge = el('span', { class: 'badge badge-shadow', text: 'shadow', hidden: true });
  r.quota = el('span', { class: 'muted small' });
  r.updateQuota = () => {
    r.quota.textContent = quotaText(r.windowMs.value, r.threshold.value);
  };
  r.windowMs.addEventListener('input', r.updateQuota);
  r.threshold.addEventListener('input', r.updateQuota);
  r.remove = el('button', {
    type: 'button',
    class: 'button button-small',
    text: 'Remove',
    'aria-label': `Remove rule ${rule.name}`,
    onclick: () => onRemove(rule.name),
  });
  r.row = el(
    'tr',
    { dataset: { rule: rule.name } },
    el('th', { scope: 'row' }, el('span', { class: 'rule-name', text: rule.name }), ' ', r.badge),
    el('td', { class: 'small key-cell', 'data-label': 'Key', text: keyText(rule.key) }),
    cell('Window (ms)', r.windowMs),
    cell('Threshold', r.threshold),
    el('td', { 'data-label': 'Allows' }, r.quota),
    cell('Max delay (ms)', r.maxDelayMs, { cls: 'shaper-col' }),
    cell('Shadow', r.shadow, { cls: 'shadow-cell', text: `Rule ${rule.name} is a shadow rule` }),
    cell('Message', r.message, { dataLabel: 'Message when refused', cls: 'message-cell' }),
    el('td', { class: 'action' }, r.remove),
  );
  return r;
}

/** Shows or hides what only the shaper has (max delay), after the algorithm chosen. */
function showShaperFields(refs) {
  const shaper = refs.algorithm.value === SHAPER;
  for (const node of refs.form.querySelectorAll('.shaper-col')) node.hidden = !shaper;
  if (refs.add) showMaxDelay(refs.add, shaper);
}

function showHints(refs) {
  refs.algorithmHint.textContent = ALGORITHMS[refs.algorithm.value]?.hint || '';
  refs.failModeHint.textContent = FAIL_MODES[refs.failMode.value]?.hint || '';
  refs.scopeHint.textContent = SCOPES[refs.scope.value]?.hint || '';
  showShaperFields(refs);
}

/** A select of the policy's settings with its label, hint and error line. */
function setting(refs, idOf, key, label, words, hintClass = '') {
  const hint = el('p', { id: idOf(`${key}-hint`), class: `small muted setting-hint ${hintClass}`.trim() });
  const select = el('select', { id: idOf(key), name: key }, options(words));
  const box = errorLine(select);
  select.setAttribute('aria-describedby', `${hint.id} ${box.id}`);
  refs.errors.set(select, box);
  refs[key] = select;
  refs[`${key}Hint`] = hint;
  select.addEventListener('change', () => showHints(refs));
  return el(
    'div',
    { class: `field setting-field ${key}-field` },
    el('label', { for: select.id, text: label }),
    el('div', { class: 'setting-control' }, select, hint),
    box,
  );
}

/**
 * Builds a policy's card; returns its element references (`card`, `form`, `save`,
 * `error`, `result`, the settings' selects, `rules`: rule name → its row's inputs,
 * `add`: the add-rule form's, …). `on` holds what the buttons do: `save()`,
 * `remove(ruleName)`, `add()`.
 */
export function renderPolicy(policy, on) {
  const slug = slugOf(policy.name);
  const idOf = (part) => `policy-${slug}-${part}`;
  /** input → its error line, for every field of the card that has one. */
  const refs = { rules: new Map(), errors: new Map() };

  refs.error = el('p', { id: idOf('error'), class: 'field-error', role: 'alert', hidden: true });
  refs.result = el('p', { class: 'notice', role: 'status', 'aria-live': 'polite', hidden: true });
  refs.save = el('button', { type: 'submit', class: 'button button-primary', text: `Save ${policy.name}` });
  refs.enabled = el('input', { id: idOf('enabled'), type: 'checkbox', name: 'enabled' });
  const algorithm = setting(refs, idOf, 'algorithm', 'Algorithm', ALGORITHMS);
  const failMode = setting(refs, idOf, 'failMode', 'When Redis is down', FAIL_MODES);
  const scope = setting(refs, idOf, 'scope', 'Scope', SCOPES, 'scope-hint');
  refs.version = el('span', { class: 'muted small' });
  refs.tbody = el('tbody');
  refs.makeRow = (rule) => ruleRow(rule, idOf, refs, on.remove);

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
        algorithm,
        failMode,
        scope,
        el('div', { class: 'checkbox-field' }, refs.enabled, el('label', { for: refs.enabled.id, text: 'Enabled' })),
      ),
      el(
        'div',
        { class: 'table-wrap' },
        el(
          'table',
          { class: 'table rules-table stack-on-phone' },
          el('caption', { class: 'visually-hidden', text: `Rules of policy ${policy.name}` }),
          el(
            'thead',
            {},
            el(
              'tr',
              {},
              RULE_COLUMNS.map(([text, cls]) => el('th', { scope: 'col', class: cls, text })),
              el('th', { scope: 'col' }, el('span', { class: 'visually-hidden', text: 'Actions' })),
            ),
          ),
          refs.tbody,
        ),
      ),
      refs.error,
      el('div', { class: 'form-actions' }, refs.save, refs.result),
    ),
  );
  refs.form.addEventListener('submit', (event) => {
    event.preventDefault();
    on.save();
  });
  refs.add = FIXED_RULES.has(policy.name) ? null : addRuleForm(policy, idOf, on.add);
  refs.card = el(
    'div',
    { class: 'policy-card', dataset: { policyCard: policy.name } },
    refs.form,
    refs.add ? refs.add.details : el('p', { class: 'small muted', text: `The rules of ${policy.name} are fixed: none can be added.` }),
  );
  return refs;
}

/** A rule's stored values in its row. */
function fillRule(r, rule) {
  r.windowMs.value = String(rule.windowMs);
  r.threshold.value = String(rule.threshold);
  r.maxDelayMs.value = rule.maxDelayMs === undefined || rule.maxDelayMs === null ? '' : String(rule.maxDelayMs);
  r.message.value = rule.message;
  r.shadow.checked = Boolean(rule.shadow);
  for (const input of ruleInputs(r)) input.removeAttribute('aria-invalid');
  r.updateQuota();
}

/**
 * Puts the rows in the stored policy's order: a row for each of its rules (new ones
 * filled from it), none for a rule it no longer has. A shadow badge says what is stored.
 */
function syncRows(refs, policy) {
  const names = new Set(policy.rules.map((rule) => rule.name));
  for (const [name, r] of refs.rules) {
    if (names.has(name)) continue;
    for (const input of ruleInputs(r)) refs.errors.delete(input);
    r.row.remove();
    refs.rules.delete(name);
  }
  for (const rule of policy.rules) {
    let r = refs.rules.get(rule.name);
    if (!r) {
      r = refs.makeRow(rule);
      refs.rules.set(rule.name, r);
      fillRule(r, rule);
    }
    r.badge.hidden = !rule.shadow;
    r.row.dataset.shadow = String(Boolean(rule.shadow));
  }
  keepInOrder(refs.tbody, policy.rules.map((rule) => refs.rules.get(rule.name).row));
  // The last rule that is not a shadow one cannot go: say so before the server does.
  const enforced = policy.rules.filter((rule) => !rule.shadow);
  for (const r of refs.rules.values()) {
    r.remove.disabled = enforced.length === 1 && enforced[0].name === r.name;
    r.remove.title = r.remove.disabled ? 'A policy needs one rule that is not a shadow rule.' : '';
  }
  if (refs.add) showRoom(refs.add, policy);
  showShaperFields(refs);
}

/** Shows a stored version of the policy in its form (what was typed is replaced). */
export function fillPolicy(refs, policy) {
  showVersion(refs, policy);
  refs.algorithm.value = policy.algorithm;
  refs.failMode.value = policy.failMode;
  refs.enabled.checked = Boolean(policy.enabled);
  refs.scope.value = scopeOf(policy);
  for (const key of ['algorithm', 'failMode', 'scope']) settingError(refs, key, '');
  syncRows(refs, policy);
  for (const rule of policy.rules) fillRule(refs.rules.get(rule.name), rule);
  showHints(refs);
}

/**
 * Shows the stored policy after a rule was added or removed from this form's version:
 * rows come and go, what was typed in the others stays (their stored values are the
 * same: the server took the change only from this version).
 */
export function showRuleSet(refs, policy) {
  showVersion(refs, policy);
  syncRows(refs, policy);
}

function showVersion(refs, policy) {
  refs.version.textContent = Number.isInteger(policy.version) ? `version ${policy.version}` : '';
}

/**
 * What changed in the form against `policy`: `{ body }` (the PUT body, null when
 * nothing did) or `{ problems: [[input, message], …] }`.
 */
export function policyChange(policy, refs) {
  const body = { rules: [] };
  const problems = [];
  if (refs.algorithm.value !== policy.algorithm) body.algorithm = refs.algorithm.value;
  if (refs.failMode.value !== policy.failMode) body.failMode = refs.failMode.value;
  if (refs.enabled.checked !== Boolean(policy.enabled)) body.enabled = refs.enabled.checked;
  if (refs.scope.value !== scopeOf(policy)) body.scope = refs.scope.value;
  const shaper = refs.algorithm.value === SHAPER;
  for (const rule of policy.rules) {
    const r = refs.rules.get(rule.name);
    const change = { name: rule.name };
    for (const [field, word] of [['windowMs', 'Window'], ['threshold', 'Threshold']]) {
      const value = wholeNumber(r[field]);
      if (value === null) problems.push([r[field], `${word} of rule ${rule.name} must be a whole number.`]);
      else if (value !== Number(rule[field])) change[field] = value;
    }
    if (shaper && (r.maxDelayMs.value.trim() !== '' || rule.maxDelayMs !== undefined)) {
      const value = wholeNumber(r.maxDelayMs);
      if (value === null || value > MAX_DELAY_MS) {
        problems.push([r.maxDelayMs, `Max delay of rule ${rule.name} must be a whole number of ms, 0 to ${formatNumber(MAX_DELAY_MS)}.`]);
      } else if (value !== Number(rule.maxDelayMs)) change.maxDelayMs = value;
    }
    if (r.shadow.checked !== Boolean(rule.shadow)) change.shadow = r.shadow.checked;
    if (r.message.value !== rule.message) change.message = r.message.value;
    if (Object.keys(change).length > 1) body.rules.push(change);
  }
  if (problems.length) return { problems };
  const changed = body.rules.length > 0 || ['algorithm', 'failMode', 'enabled', 'scope'].some((k) => k in body);
  return changed ? { body } : { body: null };
}

/**
 * The input a refused rule entry's field names: a row's, or the add-rule form's for a
 * new rule (`entry` has a key). Null when no input holds it (a rule's name, a removal).
 */
export function ruleFieldInput(refs, entry, field) {
  if (entry && 'key' in entry && refs.add) return newRuleInput(refs.add, field);
  const r = entry && refs.rules.get(entry.name);
  return (r && ['windowMs', 'threshold', 'message', 'shadow', 'maxDelayMs'].includes(field) && r[field]) || null;
}
