// A rate-limit policy as the dashboard reads it: the server's words for its algorithm,
// fail mode, scope and key sources with their labels, and the bounds of its rules,
// spelled once for the editor and the audit list. tests/docs.rs holds every list here to the
// server's words both ways, and the bounds to the server's constants.

/** The limiter's algorithms: spelling → label, and what it does (shown beside its select). */
export const ALGORITHMS = Object.freeze({
  sliding_window: {
    label: 'Sliding window',
    hint: 'Exact: counts every call of the last window (one entry per call in Redis).',
  },
  token_bucket: {
    label: 'Token bucket',
    hint: 'A burst up to the threshold, then the threshold per window, refilled continuously.',
  },
  fixed_window: {
    label: 'Fixed window',
    hint: 'One counter per window: the cheapest; up to twice the threshold across a window\u2019s edge.',
  },
  sliding_window_counter: {
    label: 'Sliding window counter',
    hint: 'This window\u2019s and the last one\u2019s counts, weighted by time: close to exact, two counters a key.',
  },
  gcra: {
    label: 'GCRA',
    hint: 'The token bucket kept as one timestamp a key: the same burst and rate, less to store.',
  },
  leaky_bucket: {
    label: 'Leaky bucket',
    hint: 'A shaper: calls leave at an even rate; one admitted waits up to its rule\u2019s max delay for its slot.',
  },
});

/** The algorithm whose rules have a max delay: an admitted call may wait for its slot. */
export const SHAPER = 'leaky_bucket';

/** What the limiter does when it cannot ask Redis: spelling → label and meaning. */
export const FAIL_MODES = Object.freeze({
  closed: { label: 'Refuse (fail closed)', hint: 'While Redis is down, every call this policy guards is refused (503).' },
  open: { label: 'Allow (fail open)', hint: 'While Redis is down, calls pass unlimited.' },
  local: {
    label: 'Limit here (fallback limits)',
    hint: 'While Redis is down, each instance enforces its share of every limit (the threshold over the instances alive, rounded up).',
  },
});

/** A policy's scopes: spelling → label, and what it means (shown beside its select). */
export const SCOPES = Object.freeze({
  global: {
    label: 'Global',
    hint: 'One limit for the whole shop: all of this policy\u2019s keys live in one Redis slot.',
  },
  per_item: {
    label: 'Per item',
    hint: 'Each sale counts separately: its limiter keys live beside the item\u2019s stock.',
  },
});

/** What a rule counts by: spelling → label. `literal` is one counter shared by every caller. */
export const KEY_SOURCES = Object.freeze({
  user: { label: 'User id' },
  ip: { label: 'Client address' },
  network: { label: 'Client network (IPv4 /24, IPv6 /48)' },
  client_id: { label: 'Client id (X-Client-Id)' },
  route: { label: 'Route' },
  literal: { label: 'One shared counter (named)' },
});

/** The rule key of a key source and, for `literal`, its name: "user", {"literal": "x"}. */
export const ruleKey = (source, literal) => (source === 'literal' ? { literal } : source);

/** A rule's name on the wire (the server's `RuleEdit.name`). */
export const RULE_NAME = /^[a-z0-9_-]{1,32}$/;
/** A literal key's value. */
export const LITERAL_KEY = /^[A-Za-z0-9._:-]{1,64}$/;
/** Rules in a policy, shadow rules included. */
export const MAX_RULES = 8;
/** The longest a leaky bucket may hold a call (the server's `MAX_DELAY_MS`). */
export const MAX_DELAY_MS = 60_000;
/** Policies whose rules are fixed: the server refuses new ones (failed sign-ins are counted one way). */
export const FIXED_RULES = Object.freeze(new Set(['admin_auth']));

/** A policy's scope; rows from before scopes have none and mean `global`. */
export const scopeOf = (policy) => policy.scope || 'global';
