//! The six algorithms as the app calls them: each one's script (compiled in from the
//! app's `lua/`) and its rule's parameters, per the contract in the app's
//! `src/limiter/backend.rs`. The trace does not link the app: these few lines say again
//! what `limiter::backend::params` says.

/// The sliding-window log first: it is the reference the others are held against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    SlidingWindow,
    TokenBucket,
    FixedWindow,
    SlidingWindowCounter,
    Gcra,
    LeakyBucket,
}

impl Algorithm {
    pub const ALL: [Algorithm; 6] = [
        Algorithm::SlidingWindow,
        Algorithm::TokenBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindowCounter,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
    ];

    /// The name the app's policies use.
    pub fn name(self) -> &'static str {
        match self {
            Self::SlidingWindow => "sliding_window",
            Self::TokenBucket => "token_bucket",
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindowCounter => "sliding_window_counter",
            Self::Gcra => "gcra",
            Self::LeakyBucket => "leaky_bucket",
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Self::SlidingWindow => include_str!("../../../lua/sliding_window.lua"),
            Self::TokenBucket => include_str!("../../../lua/token_bucket.lua"),
            Self::FixedWindow => include_str!("../../../lua/fixed_window.lua"),
            Self::SlidingWindowCounter => {
                include_str!("../../../lua/sliding_window_counter.lua")
            }
            Self::Gcra => include_str!("../../../lua/gcra.lua"),
            Self::LeakyBucket => include_str!("../../../lua/leaky_bucket.lua"),
        }
    }

    /// The parameters of one rule of `threshold` per `window_ms`, as the script takes
    /// them after ARGV[1..3]: the buckets hold `threshold` tokens refilled by `threshold`
    /// per window (the same nominal limit), the shaper's queue holds a window's worth
    /// (`max_delay_ms` = the window).
    pub fn params(self, window_ms: i64, threshold: i64) -> Vec<i64> {
        match self {
            Self::SlidingWindow | Self::FixedWindow | Self::SlidingWindowCounter => {
                vec![window_ms, threshold]
            }
            Self::TokenBucket | Self::Gcra => vec![threshold, threshold, window_ms],
            Self::LeakyBucket => vec![window_ms, threshold, window_ms],
        }
    }
}
