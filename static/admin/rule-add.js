// The form under a policy's card that adds a rule (a form of its own: forms do not
// nest): built from the policy, told whether the policy has room for another rule and
// whether its algorithm has a max delay, and read back as the rule to send. The card
// (policy-form.js) holds it as `refs.add`; the panel (policies.js) sends what it reads.
import { el } from '../dom.js';
import { formatNumber } from '../format.js';
import { KEY_SOURCES, LITERAL, LITERAL_KEY, MAX_DELAY_MS, MAX_RULES, RULE_NAME, ruleKey } from './policy.js';
import { errorLine, options, wholeNumber } from './policy-fields.js';

/** Whether the policy has room for another rule: the form says so, and its button. */
export function showRoom(add, policy) {
  const full = policy.rules.length >= MAX_RULES;
  add.full.hidden = !full;
  add.submit.disabled = full;
}

function showLiteral(add) {
  add.literalField.hidden = add.keySource.value !== LITERAL;
}

/** Shows the max delay field only while the policy's algorithm is the shaper. */
export function showMaxDelay(add, shaper) {
  add.maxDelayField.hidden = !shaper;
}

/**
 * The add-rule form of `policy`; its ids are the card's (`cardId`) with `Add-`. Returns
 * its element references (`details`, `form`, each input, `errors`: input → its error
 * line, …); `onAdd()` is called when it is submitted.
 */
export function addRuleForm(policy, cardId, onAdd) {
  // Rule names are lower case: no rule row can take these ids.
  const idOf = (part) => cardId(`Add-${part}`);
  const add = { errors: new Map() };
  const field = (key, label, input, { hint } = {}) => {
    Object.assign(input, { id: idOf(key), name: key });
    const box = errorLine(input);
    add.errors.set(input, box);
    const hintNode = hint ? el('p', { id: `${input.id}-hint`, class: 'small muted', text: hint }) : null;
    input.setAttribute('aria-describedby', hintNode ? `${hintNode.id} ${box.id}` : box.id);
    return el('div', { class: 'field' }, el('label', { for: input.id, text: label }), input, hintNode, box);
  };
  const number = (min) => el('input', { type: 'number', min, step: '1', inputmode: 'numeric' });
  add.name = el('input', { type: 'text', maxlength: '32', autocomplete: 'off', spellcheck: 'false' });
  add.keySource = el('select', {}, options(KEY_SOURCES));
  add.literal = el('input', { type: 'text', maxlength: '64', autocomplete: 'off', spellcheck: 'false' });
  add.windowMs = number('1');
  add.threshold = number('1');
  add.maxDelayMs = number('0');
  add.maxDelayMs.max = String(MAX_DELAY_MS);
  add.message = el('input', { type: 'text', maxlength: '200' });
  add.shadow = el('input', { type: 'checkbox', id: idOf('shadow'), checked: true });
  const shadowBox = errorLine(add.shadow);
  add.errors.set(add.shadow, shadowBox);
  add.shadow.setAttribute('aria-describedby', shadowBox.id);
  add.error = el('p', { class: 'field-error', role: 'alert', hidden: true });
  add.result = el('p', { class: 'notice', role: 'status', 'aria-live': 'polite', hidden: true });
  add.submit = el('button', { type: 'submit', class: 'button', text: `Add rule to ${policy.name}` });
  add.full = el('p', {
    class: 'small muted',
    text: `A policy holds at most ${MAX_RULES} rules, shadow ones included: remove one to add another.`,
    hidden: true,
  });
  add.literalField = field('literal', 'Counter name', add.literal, { hint: '1-64 of A-Z a-z 0-9 . _ : -; one count for every caller.' });
  add.maxDelayField = field('maxDelayMs', 'Max delay (ms)', add.maxDelayMs, {
    hint: `How long an admitted call may wait for its slot, 0 to ${formatNumber(MAX_DELAY_MS)}; empty: the default.`,
  });
  add.keySource.addEventListener('change', () => showLiteral(add));
  add.form = el(
    'form',
    { class: 'stack-form add-rule-form', novalidate: true, dataset: { addRule: policy.name } },
    el(
      'div',
      { class: 'field-row' },
      field('name', 'Name', add.name, { hint: '1-32 of a-z 0-9 _ -; the refusals’ dimension.' }),
      field('key', 'Counted per', add.keySource),
      add.literalField,
    ),
    el(
      'div',
      { class: 'field-row' },
      field('windowMs', 'Window (ms)', add.windowMs),
      field('threshold', 'Threshold', add.threshold),
      add.maxDelayField,
    ),
    field('message', 'Message when refused', add.message),
    el(
      'div',
      { class: 'checkbox-field' },
      add.shadow,
      el('label', { for: add.shadow.id, text: 'Shadow rule: count what it would refuse, refuse nothing' }),
    ),
    shadowBox,
    add.full,
    add.error,
    el('div', { class: 'form-actions' }, add.submit, add.result),
  );
  add.form.addEventListener('submit', (event) => {
    event.preventDefault();
    onAdd();
  });
  add.details = el(
    'details',
    { class: 'add-rule' },
    el('summary', { text: `Add a rule to ${policy.name}` }),
    add.form,
  );
  add.windowMs.value = '60000';
  showLiteral(add);
  return add;
}

/** Empties the add-rule form after its rule was added (window and key stay). */
export function resetNewRule(add) {
  for (const input of [add.name, add.literal, add.threshold, add.maxDelayMs, add.message]) input.value = '';
  add.shadow.checked = true;
}

/**
 * The rule the add-rule form describes: `{ rule }` (an entry of the PUT's rules) or
 * `{ problems: [[input, message], …] }`. The server checks the rest (key sources the
 * policy's callers cannot give, the shadow-only policy, the bounds).
 */
export function newRule(policy, refs) {
  const add = refs.add;
  const problems = [];
  const name = add.name.value.trim();
  if (!RULE_NAME.test(name)) problems.push([add.name, 'Name the rule: 1-32 of a-z 0-9 _ -.']);
  else if (policy.rules.some((rule) => rule.name === name)) {
    problems.push([add.name, `Policy ${policy.name} already has a rule ${name}: change it in the table above.`]);
  }
  const source = add.keySource.value;
  const literal = add.literal.value.trim();
  if (source === LITERAL && !LITERAL_KEY.test(literal)) {
    problems.push([add.literal, 'Name the shared counter: 1-64 of A-Z a-z 0-9 . _ : -.']);
  }
  const windowMs = wholeNumber(add.windowMs);
  if (windowMs === null) problems.push([add.windowMs, 'The window is a whole number of milliseconds.']);
  const threshold = wholeNumber(add.threshold);
  if (threshold === null) problems.push([add.threshold, 'The threshold is a whole number of calls.']);
  const message = add.message.value.trim();
  if (!message) problems.push([add.message, 'Say what a refused caller reads.']);
  const rule = { name, key: ruleKey(source, literal), windowMs, threshold, message, shadow: add.shadow.checked };
  if (!add.maxDelayField.hidden && add.maxDelayMs.value.trim() !== '') {
    const maxDelayMs = wholeNumber(add.maxDelayMs);
    if (maxDelayMs === null || maxDelayMs > MAX_DELAY_MS) {
      problems.push([add.maxDelayMs, `The max delay is a whole number of ms, 0 to ${formatNumber(MAX_DELAY_MS)}.`]);
    } else rule.maxDelayMs = maxDelayMs;
  }
  return problems.length ? { problems } : { rule };
}

/** The input of the add-rule form that holds a field of the new rule; null for none. */
export function newRuleInput(add, field) {
  if (field === 'key') return add.keySource.value === LITERAL ? add.literal : add.keySource;
  return { name: add.name, windowMs: add.windowMs, threshold: add.threshold, message: add.message, shadow: add.shadow, maxDelayMs: add.maxDelayMs }[field] || null;
}
