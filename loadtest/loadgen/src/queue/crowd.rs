//! The crowd of a run: accounts (a user, a token, an address of its own, a home
//! instance), who holds them (a human, or one of the bot operators), and the dice every
//! behaviour draws its delays from.

use std::time::Duration;

use super::site::Site;
use crate::client::ip_of;

/// Who holds an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    Human,
    /// Bot operator `n` (0-based).
    Bot(u32),
}

/// A shopper account: its user, its dev-login token, its own `X-Forwarded-For` address,
/// and the instance it talks to first.
#[derive(Debug, Clone)]
pub struct Account {
    pub user: i64,
    pub token: String,
    pub ip: String,
    /// The address's index (`client::ip_of`).
    pub ip_index: u32,
    pub home: usize,
    pub holder: Holder,
}

/// `humans` human accounts, then `operators` × `per_operator` bot accounts, users from
/// `first_user`, addresses from index `first_ip`, homes round-robin over the targets;
/// each logged in (dev login on the first target).
pub async fn log_in(
    site: &Site,
    first_user: i64,
    first_ip: u32,
    humans: u32,
    operators: u32,
    per_operator: u32,
) -> anyhow::Result<Vec<Account>> {
    let count = humans + operators * per_operator;
    let users = (0..count).map(|i| first_user + i64::from(i));
    let tokens = crate::setup::login(&site.client, &site.targets[0], users).await?;
    (0..count)
        .map(|i| {
            let user = first_user + i64::from(i);
            let token = tokens
                .get(&user)
                .ok_or_else(|| anyhow::anyhow!("no token for user {user}"))?
                .clone();
            Ok(Account {
                user,
                token,
                ip: ip_of(first_ip.wrapping_add(i)),
                ip_index: first_ip.wrapping_add(i),
                home: i as usize % site.targets.len(),
                holder: if i < humans {
                    Holder::Human
                } else {
                    Holder::Bot((i - humans) / per_operator.max(1))
                },
            })
        })
        .collect()
}

/// A small deterministic generator (SplitMix64): a run's randomness comes from one
/// seed, so the same seed makes the same crowd.
#[derive(Debug, Clone)]
pub struct Dice(u64);

impl Dice {
    /// The dice of account `user` in a run seeded with `seed`.
    pub fn new(seed: u64, user: i64) -> Self {
        let mut dice = Self(seed ^ (user as u64).wrapping_mul(0xA076_1D64_78BD_642F));
        dice.next();
        dice
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
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
