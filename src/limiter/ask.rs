//! A decision over rules its caller matched itself, each with its key and its cost:
//! what the edge asks for a request's descriptors ([`Limiter::ask`](super::Limiter::ask)).
//! A policy's check builds its rules' keys from a caller; here the caller brings them.

use super::backend::{Cost, Decision};
use super::policy::Rule;
use super::{Algorithm, FailMode};

/// What to decide.
pub struct Ask<'a> {
    /// What its failures are logged under and its fallback counts kept under (the edge:
    /// `rls:<domain>`).
    pub name: &'a str,
    /// The generation of its rules (the edge: the domain's version): a denial learned
    /// under another generation is retired, so a raised limit holds at once.
    pub generation: u64,
    /// The algorithm deciding.
    pub algorithm: Algorithm,
    /// What a failed backend call makes of the request.
    pub fail_mode: FailMode,
    /// The rules, the enforced ones first.
    pub rules: &'a [Rule],
    /// The first `enforced` rules are enforced, the rest shadow rules.
    pub enforced: usize,
    /// `keys[i]` is `rules[i]`'s; all of them share one hash tag.
    pub keys: &'a [String],
    /// `costs[i]` is how many hits the request counts for under `rules[i]` (empty: 1
    /// under every rule).
    pub costs: &'a [Cost],
}

/// What [`Ask`] got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Decided: by Redis, or in process (the denial cache, the fallback limits).
    Decided {
        /// The decision, with rule indexes into [`Ask::rules`].
        decision: Decision,
        /// After an admission by Redis, what each rule has left (`rule_remaining[i]` is
        /// `rules[i]`'s, a shadow rule's as if enforced); empty otherwise.
        rule_remaining: Vec<i64>,
        /// Who decided.
        by: AnsweredBy,
    },
    /// The backend could not decide and the fail mode is `open`: admitted, uncounted.
    FailedOpen,
    /// The backend could not decide and the fail mode is `closed`.
    FailedClosed,
}

/// Who decided an [`Answer::Decided`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnsweredBy {
    /// The script, in Redis.
    Redis,
    /// The denial cache: a refusal Redis made, repeated until its wait ends.
    DenialCache,
    /// The fallback limits, in process, while Redis could not be asked (`local`).
    FallbackLimits,
}
