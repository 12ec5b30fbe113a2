// The rules editor: every policy's card, whose changes (a save, a rule added, a rule
// removed) are sent with the version it was loaded from so that nobody overwrites a
// change they never saw. Each change reloads the audit list.
import { announce, byId, confirmDialog } from '../dom.js';
import { sentence } from '../format.js';
import { ErrorCode } from '../words.js';
import { loadAudit, showPolicyChoices } from './audit.js';
import {
  clearErrors,
  fillPolicy,
  inputError,
  newRule,
  policyChange,
  renderPolicy,
  resetNewRule,
  ruleFieldInput,
  settingError,
  showRuleSet,
} from './policy-form.js';
import { adminApi, loadPanel } from './session.js';

const ui = {
  error: byId('rules-error'),
  policies: byId('policies'),
};

/** name → {policy (as stored, with the version the form was loaded from), refs (its card)}. */
const policyForms = new Map();

/** The settings a refusal may name (each shown beside its select): [in a sentence, its label]. */
const SETTINGS = {
  algorithm: ['the algorithm', 'Algorithm'],
  failMode: ['the fail mode', 'When Redis is down'],
  scope: ['the scope', 'Scope'],
};

export async function loadPolicies() {
  const data = await loadPanel('/admin/api/policies', ui.error, 'the rules');
  if (!data) return;
  const policies = Array.isArray(data.policies) ? data.policies : [];
  policyForms.clear();
  ui.policies.replaceChildren(
    ...policies.map((policy) => {
      const refs = renderPolicy(policy, {
        save: () => savePolicy(policy.name),
        remove: (rule) => removeRule(policy.name, rule),
        add: () => addRule(policy.name),
      });
      fillPolicy(refs, policy);
      policyForms.set(policy.name, { policy, refs });
      return refs.card;
    }),
  );
  showPolicyChoices(policies.map((p) => p.name));
}

/** PUTs a change of policy `name` made from the version its card was loaded from. */
function put(name, version, body) {
  // If someone else saved since, the server refuses (409 VERSION_CONFLICT) rather than
  // overwrite what this operator never saw.
  return adminApi(`/admin/api/policies/${encodeURIComponent(name)}`, {
    method: 'PUT',
    body,
    headers: Number.isInteger(version) ? { 'If-Match': `"${version}"` } : {},
  });
}

/** Clears what the card said about its last change. */
function quiet(refs) {
  announce(refs.error, '');
  announce(refs.result, '');
  if (refs.add) {
    announce(refs.add.error, '');
    announce(refs.add.result, '');
  }
  clearErrors(refs);
}

/**
 * Says why the server refused a change, next to what it refused: `sent` is the body,
 * `line` the alert of the form it came from, `verb` what did not happen ("Not saved").
 */
async function refused(name, refs, sent, error, line, verb) {
  if (error.code === ErrorCode.VERSION_CONFLICT) {
    const reloaded = await reloadPolicy(name);
    announce(
      line,
      `${verb}: someone else changed policy ${name} since you loaded it` +
        (reloaded ? ` (now version ${reloaded.version}). The form shows their version; make your change again.` : '. Reload the page to see their version.'),
      'error',
    );
    loadAudit();
    return;
  }
  if (error.code !== ErrorCode.VALIDATION_FAILED) {
    announce(line, `${verb}: ${error.message}`, 'error');
    return;
  }
  const field = error.field || '';
  const message = sentence(error.message);
  if (Object.hasOwn(SETTINGS, field)) {
    // A setting of the policy, not a rule: the message goes next to its select.
    const [what, label] = SETTINGS[field];
    settingError(refs, field, message);
    announce(line, `${verb}: ${what} was refused (see ${label} above).`, 'error');
    refs[field].focus();
    return;
  }
  announce(line, `${verb}: ${message}`, 'error');
  // `rules[2].key`: the field of the body's third rule; a bare `threshold` (an older
  // server) names the kind of field, in whichever rules were changed.
  const indexed = /^rules\[(\d+)\]\.(\w+)$/.exec(field);
  const entries = indexed ? [sent.rules[Number(indexed[1])]] : sent.rules.filter((entry) => field in entry);
  const inputs = entries.map((entry) => ruleFieldInput(refs, entry, indexed ? indexed[2] : field)).filter(Boolean);
  for (const input of inputs) inputError(refs, input, message);
  if (inputs.length) inputs[0].focus();
}

async function savePolicy(name) {
  const entry = policyForms.get(name);
  if (!entry) return;
  const { refs } = entry;
  quiet(refs);
  const change = policyChange(entry.policy, refs);
  if (change.problems) {
    for (const [input, message] of change.problems) inputError(refs, input, message);
    announce(refs.error, change.problems[0][1], 'error');
    change.problems[0][0].focus();
    return;
  }
  if (!change.body) {
    announce(refs.result, 'Nothing to save: no value was changed.', 'info');
    return;
  }
  refs.save.disabled = true;
  const result = await put(name, entry.policy.version, change.body);
  refs.save.disabled = false;
  if (!result.ok) {
    if (result.status !== 401) await refused(name, refs, change.body, result.error, refs.error, 'Not saved');
    return;
  }
  entry.policy = result.data;
  fillPolicy(refs, result.data);
  announce(refs.result, `Saved policy ${name}. In force on every instance within a second.`, 'ok');
  loadAudit();
}

async function addRule(name) {
  const entry = policyForms.get(name);
  if (!entry || !entry.refs.add) return;
  const { refs } = entry;
  const add = refs.add;
  quiet(refs);
  const made = newRule(entry.policy, refs);
  if (made.problems) {
    for (const [input, message] of made.problems) inputError(refs, input, message);
    made.problems[0][0].focus();
    return;
  }
  const body = { rules: [made.rule] };
  add.submit.disabled = true;
  const result = await put(name, entry.policy.version, body);
  add.submit.disabled = false;
  if (!result.ok) {
    if (result.status !== 401) await refused(name, refs, body, result.error, add.error, 'Not added');
    return;
  }
  entry.policy = result.data;
  showRuleSet(refs, result.data);
  resetNewRule(add);
  const kind = made.rule.shadow ? 'shadow rule' : 'rule';
  announce(add.result, `Added ${kind} ${made.rule.name} to policy ${name}. In force on every instance within a second.`, 'ok');
  loadAudit();
}

async function removeRule(name, rule) {
  const entry = policyForms.get(name);
  if (!entry) return;
  const { refs } = entry;
  const stored = entry.policy.rules.find((r) => r.name === rule);
  const sure = await confirmDialog({
    title: `Remove rule ${rule} from policy ${name}?`,
    text: stored && stored.shadow
      ? 'It stops counting on every instance within a second, and its line leaves the charts.'
      : 'Calls stop being limited by it on every instance within a second. Adding it again starts its count from zero.',
    yes: 'Remove the rule',
  });
  if (!sure) return;
  quiet(refs);
  const body = { rules: [{ name: rule, remove: true }] };
  const button = refs.rules.get(rule)?.remove;
  if (button) button.disabled = true;
  const result = await put(name, entry.policy.version, body);
  if (!result.ok) {
    if (button) button.disabled = false;
    if (result.status !== 401) await refused(name, refs, body, result.error, refs.error, `Rule ${rule} not removed`);
    return;
  }
  entry.policy = result.data;
  showRuleSet(refs, result.data);
  announce(refs.result, `Removed rule ${rule} from policy ${name}. In force on every instance within a second.`, 'ok');
  // The button that had the focus is gone with its row: the form's outcome takes it.
  refs.save.focus();
  loadAudit();
}

/** Loads one policy again into its card (after a conflict); returns it, or null. */
async function reloadPolicy(name) {
  const entry = policyForms.get(name);
  const result = await adminApi(`/admin/api/policies/${encodeURIComponent(name)}`);
  if (!entry || !result.ok || !result.data) return null;
  entry.policy = result.data;
  fillPolicy(entry.refs, result.data);
  return result.data;
}
