// The edge limiter's domains: the list with their versions, and one domain edited as
// its JSON document (envoyproxy/ratelimit's YAML file as JSON, snake_case as that file
// spells it). A save or a deletion is sent with the version the text was loaded from,
// so nobody overwrites a change they never saw (409 VERSION_CONFLICT).
import { announce, byId, confirmDialog, el } from '../dom.js';
import { ErrorCode } from '../words.js';
import { adminApi, loadPanel } from './session.js';

const ui = {
  error: byId('domains-error'),
  list: byId('domains-list'),
  empty: byId('domains-empty'),
  form: byId('domain-form'),
  name: byId('domain-name'),
  text: byId('domain-text'),
  version: byId('domain-version'),
  remove: byId('domain-delete'),
  result: byId('domain-result'),
};

/** The domain the text was loaded from and its version; null for a new domain. */
let loaded = null;

const path = (name) => `/admin/api/rls/domains/${encodeURIComponent(name)}`;
const ifMatch = () => (loaded ? { 'If-Match': `"${loaded.version}"` } : {});

function showLoaded(name, version) {
  loaded = version ? { name, version } : null;
  ui.version.textContent = version ? `version ${version}` : 'new domain';
  ui.remove.disabled = !version;
}

export async function loadDomains() {
  const data = await loadPanel('/admin/api/rls/domains', ui.error, 'the edge domains');
  if (!data) return;
  const domains = Array.isArray(data.domains) ? data.domains : [];
  ui.empty.hidden = domains.length > 0;
  ui.list.replaceChildren(
    ...domains.map((d) =>
      el(
        'li',
        {},
        el('button', { type: 'button', class: 'button button-small', text: d.domain, onclick: () => openDomain(d.domain) }),
        ` version ${d.version}, by ${d.updatedBy}`,
      ),
    ),
  );
}

async function openDomain(name) {
  announce(ui.result, '');
  const result = await adminApi(path(name));
  if (!result.ok) {
    announce(ui.result, `Could not load domain ${name}: ${result.error.message}`, 'error');
    return;
  }
  const version = Number((result.headers.get('ETag') || '').replaceAll('"', ''));
  ui.name.value = name;
  ui.text.value = JSON.stringify(result.data, null, 2);
  showLoaded(name, Number.isInteger(version) && version > 0 ? version : null);
}

/** Why the server refused, with the field it names. */
function refused(verb, error) {
  if (error.code === ErrorCode.VERSION_CONFLICT) {
    return `${verb}: someone else changed this domain since you loaded it (now version ${error.currentVersion}). Load it again and make your change again.`;
  }
  return `${verb}: ${error.message}${error.field ? ` (${error.field})` : ''}`;
}

async function save(event) {
  event.preventDefault();
  const name = ui.name.value.trim();
  let document;
  try {
    document = JSON.parse(ui.text.value);
  } catch (e) {
    announce(ui.result, `Not saved: the text is not JSON (${e.message}).`, 'error');
    return;
  }
  const sameDomain = loaded && loaded.name === name;
  const result = await adminApi(path(name), {
    method: 'PUT',
    body: document,
    headers: sameDomain ? ifMatch() : {},
  });
  if (!result.ok) {
    announce(ui.result, refused('Not saved', result.error), 'error');
    return;
  }
  const version = Number((result.headers.get('ETag') || '').replaceAll('"', ''));
  showLoaded(name, version);
  ui.text.value = JSON.stringify(result.data, null, 2);
  announce(ui.result, `Saved domain ${name} (version ${version}); in force on every instance within a second.`, 'ok');
  loadDomains();
}

async function remove() {
  if (!loaded) return;
  const { name } = loaded;
  const yes = await confirmDialog({
    title: `Delete domain ${name}?`,
    text: 'Its limits stop applying on every instance within a second. A file of this domain seeds it again at the next start.',
    yes: 'Delete domain',
  });
  if (!yes) return;
  const result = await adminApi(path(name), { method: 'DELETE', headers: ifMatch() });
  if (!result.ok) {
    announce(ui.result, refused('Not deleted', result.error), 'error');
    return;
  }
  showLoaded(name, null);
  announce(ui.result, `Deleted domain ${name}.`, 'ok');
  loadDomains();
}

ui.form.addEventListener('submit', save);
ui.remove.addEventListener('click', remove);
ui.name.addEventListener('input', () => {
  if (loaded && loaded.name !== ui.name.value.trim()) showLoaded(ui.name.value.trim(), null);
});
