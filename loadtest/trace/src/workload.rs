//! The trace: which key sends when, generated from one seed.
//!
//! Three kinds of keys, each an independent stream of its own dice (key i's requests
//! depend on the seed and i only), drawn in this order:
//! - edge bursters: a low Poisson background (a fifth of the limit) and, at each window
//!   edge inside the trace with even odds, a burst of 50-100 requests in the two
//!   seconds before the edge and another in the two seconds after it;
//! - Pareto keys: Poisson arrivals at a rate drawn from a Pareto law (heavy-tailed: most
//!   keys far below the limit, a few far above it), until they leave just the near
//!   keys' share of the requests and of the keys to draw;
//! - near keys: Poisson arrivals at 0.9-1.1 times the limit, the whole trace long, until
//!   the trace has its requests and the steady keys (all but the bursters) whose rate
//!   over the trace is within 10 % of the limit send at least the asked share of them.
//!
//! Times are whole milliseconds of the trace's own clock, which starts on a window edge.

use loadtest_core::dice::Dice;

/// The nominal limit of every key: `LIMIT` requests per `WINDOW_MS`.
pub const LIMIT: i64 = 100;
pub const WINDOW_MS: i64 = 60_000;
/// The Pareto law of the other keys' rates, as multiples of the limit: the shape (1.16,
/// the "80/20" law), the least rate and the greatest (the law is cut there).
pub const PARETO_SHAPE: f64 = 1.16;
pub const PARETO_LEAST: f64 = 0.01;
pub const PARETO_MOST: f64 = 50.0;
/// The edge bursters: background rate, odds of a burst at an edge, its size on each
/// side of the edge, and how far from the edge it spreads.
pub const BURST_BACKGROUND: f64 = 0.2;
pub const BURST_ODDS: f64 = 0.5;
pub const BURST_SIZE: (i64, i64) = (50, 100);
pub const BURST_SPREAD_MS: i64 = 2_000;

/// What a trace is asked to hold.
#[derive(Debug, Clone)]
pub struct Shape {
    pub seed: u64,
    /// At least this many requests...
    pub requests: usize,
    /// ...from at least this many keys...
    pub keys: usize,
    /// ...over this many windows.
    pub windows: i64,
    /// The least share of the requests from steady keys within 10 % of the limit.
    pub near_share: f64,
    pub bursters: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Near,
    Burster,
    Pareto,
}

/// One request: when, and which key (an index into `Trace::keys`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Request {
    pub at_ms: i64,
    pub key: u32,
}

#[derive(Debug, Clone)]
pub struct Key {
    pub kind: Kind,
    /// The rate it was drawn with, as a multiple of the limit (a burster's background).
    pub nominal: f64,
    pub requests: usize,
}

#[derive(Debug, Clone)]
pub struct Trace {
    pub shape: Shape,
    /// The trace's clock at its first millisecond (a window edge).
    pub start_ms: i64,
    pub span_ms: i64,
    /// In trace order: by time, then key, each key's own requests in their order.
    pub requests: Vec<Request>,
    pub keys: Vec<Key>,
    /// Edges at which a burster burst, and the requests of those bursts.
    pub bursts: usize,
    pub burst_requests: usize,
}

/// The trace's clock starts here: 2023-11-14T22:14:00Z, a whole minute, so its windows
/// line up with the counters' aligned ones.
const START_MS: i64 = 1_700_000_040_000;
const _: () = assert!(START_MS % WINDOW_MS == 0);

/// The keys as they are drawn, each with its requests' times.
#[derive(Default)]
struct Draw {
    times: Vec<Vec<i64>>,
    keys: Vec<Key>,
    total: usize,
}

impl Draw {
    /// The dice of the next key.
    fn dice(&self, seed: u64) -> Dice {
        Dice::new(seed, self.keys.len() as i64)
    }

    fn add(&mut self, kind: Kind, nominal: f64, times: Vec<i64>) {
        self.total += times.len();
        self.keys.push(Key {
            kind,
            nominal,
            requests: times.len(),
        });
        self.times.push(times);
    }
}

/// Where a key's rate over the whole trace lies against the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Band {
    /// Under 0.9 times the limit.
    Below,
    /// 0.9 to 1.1 times the limit (both included).
    Near,
    /// Over 1.1 times.
    Above,
}

impl Trace {
    pub fn generate(shape: Shape) -> Self {
        let span_ms = shape.windows * WINDOW_MS;
        let mut draw = Draw::default();
        let (mut bursts, mut burst_requests) = (0, 0);
        for _ in 0..shape.bursters {
            let mut dice = draw.dice(shape.seed);
            let mut at = poisson(&mut dice, BURST_BACKGROUND, span_ms);
            for edge in 1..shape.windows {
                if dice.unit() >= BURST_ODDS {
                    continue;
                }
                bursts += 1;
                let edge_ms = edge * WINDOW_MS;
                for from in [edge_ms - BURST_SPREAD_MS, edge_ms] {
                    let sizes = (BURST_SIZE.1 - BURST_SIZE.0 + 1) as f64;
                    let size = BURST_SIZE.0 + (dice.unit() * sizes) as i64;
                    burst_requests += size as usize;
                    at.extend(
                        (0..size).map(|_| from + (dice.unit() * BURST_SPREAD_MS as f64) as i64),
                    );
                }
            }
            at.sort_unstable();
            draw.add(Kind::Burster, BURST_BACKGROUND, at);
        }
        // The Pareto keys leave room for the near ones' share...
        let at_limit = (LIMIT * shape.windows) as usize;
        let near_planned = (shape.near_share * shape.requests as f64 / at_limit as f64).ceil();
        let pareto_requests = (1.0 - shape.near_share) * shape.requests as f64;
        while (draw.total as f64) < pareto_requests
            || draw.keys.len() + (near_planned as usize) < shape.keys
        {
            let mut dice = draw.dice(shape.seed);
            let rate = pareto(&mut dice);
            draw.add(Kind::Pareto, rate, poisson(&mut dice, rate, span_ms));
        }
        // ...which are added until the trace has its requests and, from the steady keys
        // within 10 % of the limit (as measured: a near key may fall outside, a Pareto
        // key inside), its share of them.
        let near_share = |draw: &Draw| {
            let near = draw
                .keys
                .iter()
                .filter(|k| {
                    k.kind != Kind::Burster && band(k.requests, shape.windows) == Band::Near
                })
                .map(|k| k.requests)
                .sum::<usize>();
            near as f64 / draw.total.max(1) as f64
        };
        while draw.total < shape.requests || near_share(&draw) < shape.near_share {
            let mut dice = draw.dice(shape.seed);
            let rate = 0.9 + 0.2 * dice.unit();
            draw.add(Kind::Near, rate, poisson(&mut dice, rate, span_ms));
        }
        let mut requests: Vec<Request> = draw
            .times
            .iter()
            .enumerate()
            .flat_map(|(key, at)| {
                at.iter().map(move |&t| Request {
                    at_ms: START_MS + t,
                    key: key as u32,
                })
            })
            .collect();
        // Stable: a key's requests in the same millisecond keep their order.
        requests.sort_by_key(|r| (r.at_ms, r.key));
        Self {
            shape,
            start_ms: START_MS,
            span_ms,
            requests,
            keys: draw.keys,
            bursts,
            burst_requests,
        }
    }

    /// Steady keys (all but the edge bursters) and their requests in `band`.
    pub fn in_band(&self, band: Band) -> (usize, usize) {
        count(self.keys.iter().filter(|k| {
            k.kind != Kind::Burster && self::band(k.requests, self.shape.windows) == band
        }))
    }

    /// Key `key`'s band, `None` for an edge burster.
    pub fn steady_band(&self, key: usize) -> Option<Band> {
        let k = &self.keys[key];
        (k.kind != Kind::Burster).then(|| band(k.requests, self.shape.windows))
    }

    /// Keys and their requests of `kind`.
    pub fn of_kind(&self, kind: Kind) -> (usize, usize) {
        count(self.keys.iter().filter(|k| k.kind == kind))
    }
}

/// Where a key's rate lies, from its `requests` over `windows` windows.
fn band(requests: usize, windows: i64) -> Band {
    let rate = requests as f64 / (LIMIT * windows) as f64;
    if rate < 0.9 {
        Band::Below
    } else if rate <= 1.1 {
        Band::Near
    } else {
        Band::Above
    }
}

fn count<'a>(keys: impl Iterator<Item = &'a Key>) -> (usize, usize) {
    keys.fold((0, 0), |(keys, requests), k| {
        (keys + 1, requests + k.requests)
    })
}

/// Poisson arrivals at `rate` times the limit, in `[0, span_ms)`, whole milliseconds.
fn poisson(dice: &mut Dice, rate: f64, span_ms: i64) -> Vec<i64> {
    let per_ms = rate * LIMIT as f64 / WINDOW_MS as f64;
    let mut at = Vec::new();
    let mut t = 0.0;
    loop {
        t += -(1.0 - dice.unit()).ln() / per_ms;
        if t >= span_ms as f64 {
            return at;
        }
        at.push(t as i64);
    }
}

/// A rate from the Pareto law cut at `PARETO_MOST` (inverse of its distribution).
fn pareto(dice: &mut Dice) -> f64 {
    let cut = 1.0 - (PARETO_LEAST / PARETO_MOST).powf(PARETO_SHAPE);
    PARETO_LEAST * (1.0 - dice.unit() * cut).powf(-1.0 / PARETO_SHAPE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Shape {
        Shape {
            seed: 5,
            requests: 20_000,
            keys: 200,
            windows: 4,
            near_share: 0.25,
            bursters: 5,
        }
    }

    #[test]
    fn the_same_seed_makes_the_same_trace_in_time_order() {
        let (a, b) = (Trace::generate(small()), Trace::generate(small()));
        assert_eq!(a.requests, b.requests);
        assert!(a.requests.len() >= 20_000 && a.keys.len() >= 200);
        assert!(a.requests.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert!(a
            .requests
            .iter()
            .all(|r| r.at_ms >= a.start_ms && r.at_ms < a.start_ms + a.span_ms));
        assert_eq!(a.start_ms % WINDOW_MS, 0);
        let (_, near) = a.in_band(Band::Near);
        assert!(
            near * 4 >= a.requests.len(),
            "{near} of {}",
            a.requests.len()
        );
    }

    #[test]
    fn pareto_rates_stay_within_the_law() {
        let mut dice = Dice::new(1, 1);
        let rates: Vec<f64> = (0..10_000).map(|_| pareto(&mut dice)).collect();
        assert!(rates
            .iter()
            .all(|&r| (PARETO_LEAST..=PARETO_MOST).contains(&r)));
        let above = rates.iter().filter(|&&r| r > 1.0).count();
        // P(rate > 1) = 0.01^1.16, about 0.48 %.
        assert!((20..100).contains(&above), "{above}");
    }
}
