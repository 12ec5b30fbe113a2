// What both forms of a policy's card (policy-form.js, rule-add.js) are built from and
// read back with: a select's options, an input's error line, a whole number typed.
import { el } from '../dom.js';

/** The options of a select from a table of words (`policy.js`: spelling → its label). */
export const options = (words) => Object.entries(words).map(([value, w]) => el('option', { value, text: w.label }));

/** A whole number typed in `input`, or null. */
export function wholeNumber(input) {
  const text = input.value.trim();
  return /^\d+$/.test(text) ? Number(text) : null;
}

/** The error line under an input (its id is the input's plus `-error`). */
export const errorLine = (input) => el('p', { id: `${input.id}-error`, class: 'field-error', hidden: true });
