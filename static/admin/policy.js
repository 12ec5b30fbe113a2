// A rate-limit policy as the dashboard reads it: the server's words for its algorithm
// and scope with their labels, spelled once for the editor and the audit list.

/** The limiter's algorithms: spelling → label. */
export const ALGORITHMS = Object.freeze({
  sliding_window: 'Sliding window',
  token_bucket: 'Token bucket',
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

/** A policy's scope; rows from before scopes have none and mean `global`. */
export const scopeOf = (policy) => policy.scope || 'global';
