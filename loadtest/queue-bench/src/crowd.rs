//! The crowd of a run: accounts (a user, a token, an address of its own, a home
//! instance) and who holds them (a human, or one of the bot operators). The dice every
//! behaviour draws its delays from are `loadtest_core::dice`.

use loadtest_core::client::ip_of;

use crate::site::Site;

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
    let tokens = loadtest_core::setup::login(&site.client, &site.targets[0], users).await?;
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
