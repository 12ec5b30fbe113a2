// Small DOM helpers shared by both pages: building elements, announcing outcomes, field
// errors, keyed lists that keep their nodes, and polling while the page is visible.

/** The element with this id. */
export const byId = (id) => document.getElementById(id);

/** document.createElement with properties, attributes and children in one call. */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') node.addEventListener(key.slice(2), value);
    else if (key in node && typeof value !== 'string') node[key] = value;
    else node.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/**
 * Shows a message in an aria-live region. `tone` is 'ok', 'error', 'warn' or 'info'.
 * The text is replaced (not appended) so screen readers announce the new outcome.
 */
export function announce(region, text, tone = 'info') {
  region.classList.remove('tone-ok', 'tone-error', 'tone-warn', 'tone-info');
  region.textContent = '';
  if (!text) {
    region.hidden = true;
    return;
  }
  region.hidden = false;
  region.classList.add(`tone-${tone}`);
  if (text instanceof Node) region.append(text);
  else region.textContent = text;
}

/**
 * Marks an input invalid with a message in its error line (by default the element
 * `<input id>-error`), or clears both when the message is empty.
 */
export function fieldError(input, message, box = byId(`${input.id}-error`)) {
  if (message) input.setAttribute('aria-invalid', 'true');
  else input.removeAttribute('aria-invalid');
  box.textContent = message;
  box.hidden = !message;
}

/**
 * Puts `nodes` at the start of `parent` in this order, moving only those out of place:
 * a row or card that stays keeps its focus and state across polls.
 */
export function keepInOrder(parent, nodes) {
  let previous = null;
  for (const node of nodes) {
    const want = previous ? previous.nextSibling : parent.firstChild;
    if (node !== want) parent.insertBefore(node, want);
    previous = node;
  }
}

/** Calls `fn` now and then every `ms` while the page is visible; returns a stop function. */
export function poll(fn, ms) {
  let timer = null;
  let stopped = false;
  let running = false;
  const tick = async () => {
    if (stopped || running) return;
    running = true;
    try {
      await fn();
    } finally {
      running = false;
    }
  };
  const start = () => {
    if (timer === null && !stopped) timer = setInterval(tick, ms);
  };
  const pause = () => {
    if (timer !== null) clearInterval(timer);
    timer = null;
  };
  const onVisibility = () => {
    if (document.hidden) pause();
    else {
      tick();
      start();
    }
  };
  document.addEventListener('visibilitychange', onVisibility);
  tick();
  if (!document.hidden) start();
  return () => {
    stopped = true;
    pause();
    document.removeEventListener('visibilitychange', onVisibility);
  };
}

let dialogs = 0;

/**
 * Asks a yes/no question in a modal <dialog> of the page, for a step that cannot be
 * undone (window.confirm cannot be styled, and a test cannot answer it as a person
 * would). Resolves true when `yes` is pressed; `no`, Escape or closing answers false.
 * The safe answer has the focus; the browser gives it back where it was on closing.
 */
export function confirmDialog({ title, text, yes, no = 'Go back', tone = 'danger' }) {
  return new Promise((resolve) => {
    const n = ++dialogs;
    const yesButton = el('button', { type: 'button', class: `button button-${tone}`, text: yes });
    const noButton = el('button', { type: 'button', class: 'button', text: no });
    const dialog = el(
      'dialog',
      { class: 'dialog confirm-dialog', 'aria-labelledby': `confirm-${n}-title`, 'aria-describedby': `confirm-${n}-text` },
      el('h2', { id: `confirm-${n}-title`, text: title }),
      el('p', { id: `confirm-${n}-text`, text }),
      el('div', { class: 'dialog-actions' }, noButton, yesButton),
    );
    let answer = false;
    yesButton.addEventListener('click', () => {
      answer = true;
      dialog.close();
    });
    noButton.addEventListener('click', () => dialog.close());
    dialog.addEventListener('close', () => {
      dialog.remove();
      resolve(answer);
    });
    document.body.append(dialog);
    dialog.showModal();
    noButton.focus();
  });
}
