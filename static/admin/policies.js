// The rules editor: every policy's form, saved with the version it was loaded from so
// that nobody overwrites a change they never saw. A save reloads the audit list.
import { announce, byId } from '../dom.js';
import { sentence } from '../format.js';
import { ErrorCode } from '../words.js';
import { loadAudit, showPolicyChoices } from './audit.js';
import { fillPolicy, policyChange, renderPolicy, ruleInputs, scopeError } from './policy-form.js';
import { adminApi, loadPanel } from './session.js';

const ui = {
  error: byId('rules-error'),
  policies: byId('policies'),
};

/** name → {policy (as stored, with the version the form was loaded from), refs (its form)}. */
const policyForms = new Map();

export async function loadPolicies() {
  const data = await loadPanel('/admin/api/policies', ui.error, 'the rules');
  if (!data) return;
  const policies = Array.isArray(data.policies) ? data.policies : [];
  policyForms.clear();
  ui.policies.replaceChildren(
    ...policies.map((policy) => {
      const refs = renderPolicy(policy, () => savePolicy(policy.name));
      fillPolicy(refs, policy);
      policyForms.set(policy.name, { policy, refs });
      return refs.form;
    }),
  );
  showPolicyChoices(policies.map((p) => p.name));
}

/** Says why the server refused a save, next to what it refused. */
async function refused(name, refs, change, error) {
  if (error.code === ErrorCode.VERSION_CONFLICT) {
    const reloaded = await reloadPolicy(name);
    announce(
      refs.error,
      `Not saved: someone else changed policy ${name} since you loaded it` +
        (reloaded ? ` (now version ${reloaded.version}). The form shows their version; make your change again.` : '. Reload the page to see their version.'),
      'error',
    );
    loadAudit();
  } else if (error.code === ErrorCode.VALIDATION_FAILED && error.field === 'scope') {
    // The policy's scope, not a rule: the message goes next to its select.
    scopeError(refs, sentence(error.message));
    announce(refs.error, 'Not saved: the scope was refused (see Scope above).', 'error');
    refs.scope.focus();
  } else if (error.code === ErrorCode.VALIDATION_FAILED) {
    // Mark the fields of that kind that were changed (the message names the rule).
    const field = error.field;
    for (const rc of change.body.rules) {
      const r = refs.rules.get(rc.name);
      if (r && r[field] && field in rc) r[field].setAttribute('aria-invalid', 'true');
    }
    announce(refs.error, `Not saved: ${sentence(error.message)}`, 'error');
  } else {
    announce(refs.error, `Not saved: ${error.message}`, 'error');
  }
}

async function savePolicy(name) {
  const entry = policyForms.get(name);
  if (!entry) return;
  const { refs } = entry;
  announce(refs.error, '');
  announce(refs.result, '');
  scopeError(refs, '');
  for (const r of refs.rules.values()) {
    for (const input of ruleInputs(r)) input.removeAttribute('aria-invalid');
  }
  const change = policyChange(entry.policy, refs);
  if (change.problems) {
    for (const [input] of change.problems) input.setAttribute('aria-invalid', 'true');
    announce(refs.error, change.problems[0][1], 'error');
    change.problems[0][0].focus();
    return;
  }
  if (!change.body) {
    announce(refs.result, 'Nothing to save: no value was changed.', 'info');
    return;
  }
  refs.save.disabled = true;
  // The version this form was loaded from: if someone else saved since, the server
  // refuses (409 VERSION_CONFLICT) rather than overwrite what this operator never saw.
  const version = entry.policy.version;
  const result = await adminApi(`/admin/api/policies/${encodeURIComponent(name)}`, {
    method: 'PUT',
    body: change.body,
    headers: Number.isInteger(version) ? { 'If-Match': `"${version}"` } : {},
  });
  refs.save.disabled = false;
  if (!result.ok) {
    if (result.status !== 401) await refused(name, refs, change, result.error);
    return;
  }
  const stored = result.data;
  entry.policy = stored;
  fillPolicy(refs, stored);
  announce(refs.result, `Saved policy ${name}. In force on every instance within a second.`, 'ok');
  loadAudit();
}

/** Loads one policy again into its form (after a conflict); returns it, or null. */
async function reloadPolicy(name) {
  const entry = policyForms.get(name);
  const result = await adminApi(`/admin/api/policies/${encodeURIComponent(name)}`);
  if (!entry || !result.ok || !result.data) return null;
  entry.policy = result.data;
  fillPolicy(entry.refs, result.data);
  return result.data;
}
