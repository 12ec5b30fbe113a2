//! The dice of a run: one seed makes the same crowd (the waiting room's bench) and the
//! same trace (the algorithm trace).

use std::time::Duration;

/// A small deterministic generator (SplitMix64): a run's randomness comes from one
/// seed, so the same seed makes the same crowd.
#[derive(Debug, Clone)]
pub struct Dice(u64);

impl Dice {
    /// The dice of account `user` in a run seeded with `seed`.
    pub fn new(seed: u64, user: i64) -> Self {
        let mut dice = Self(seed ^ (user as u64).wrapping_mul(0xA076_1D64_78BD_642F));
        dice.next_u64();
        dice
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [low, high].
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        low + high.saturating_sub(low).mul_f64(self.unit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dice_are_repeatable_and_spread() {
        let draws = |seed| {
            let mut dice = Dice::new(seed, 7);
            (0..1000).map(|_| dice.unit()).collect::<Vec<_>>()
        };
        assert_eq!(draws(1), draws(1));
        assert_ne!(draws(1), draws(2));
        let mean = draws(3).iter().sum::<f64>() / 1000.0;
        assert!((0.45..0.55).contains(&mean), "{mean}");
        let mut dice = Dice::new(1, 1);
        let d = dice.between(Duration::from_secs(1), Duration::from_secs(2));
        assert!((Duration::from_secs(1)..=Duration::from_secs(2)).contains(&d));
    }
}
