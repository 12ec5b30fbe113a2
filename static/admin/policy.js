// A rate-limit policy as the dashboard reads it: the limiter's words (static/words.js,
// held to the server's by tests/docs.rs) as tables by spelling, as the editor's selects
// and the audit list read them, and what the two forms share.
import { Algorithm, FailMode, KeySource, Scope } from '../words.js';

export { FIXED_RULES, LITERAL_KEY, MAX_DELAY_MS, MAX_RULES, RULE_NAME } from '../words.js';

/** A set of words as a table by spelling: spelling → the word (its label, its hint). */
const bySpelling = (words) => Object.freeze(Object.fromEntries(Object.values(words).map((w) => [w.word, w])));

/** The limiter's algorithms: spelling → label, and what it does (shown beside its select). */
export const ALGORITHMS = bySpelling(Algorithm);

/** The algorithm whose rules have a max delay: an admitted call may wait for its slot. */
export const SHAPER = Object.values(Algorithm).find((a) => a.shapes).word;

/** What the limiter does when it cannot ask Redis: spelling → label and meaning. */
export const FAIL_MODES = bySpelling(FailMode);

/** A policy's scopes: spelling → label, and what it means (shown beside its select). */
export const SCOPES = bySpelling(Scope);

/** What a rule counts by: spelling → label. */
export const KEY_SOURCES = bySpelling(KeySource);

/** The key source whose rules name their one shared counter. */
export const LITERAL = KeySource.LITERAL.word;

/** The rule key of a key source and, for `literal`, its name: "user", {"literal": "x"}. */
export const ruleKey = (source, literal) => (source === LITERAL ? { [LITERAL]: literal } : source);

/** A policy's scope; rows from before scopes have none and mean `global`. */
export const scopeOf = (policy) => policy.scope || Scope.GLOBAL.word;
