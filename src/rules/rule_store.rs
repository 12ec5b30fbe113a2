//! Rate-limit rules as data in Postgres, changed at runtime.
//!
//! On first start the settings seed `limiter_policies`; from then on Postgres is the
//! truth. A change is validated exactly as settings are ([`PolicySet::parse`]), bumps the
//! policy's version (an edit made from an older version is refused: optimistic
//! concurrency between operators), is written with an audit row in one transaction, and
//! is announced by bumping
//! `<prefix>:limiter:version` in Redis. Every instance polls that key every 500 ms and
//! reloads the rules from Postgres when it moves, so a change is in force everywhere
//! within about half a second, without a restart. Polling (rather than pub/sub alone)
//! means an instance that missed a message, or Redis restarting, only delays a change.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::PgPool;

use super::edit::{PolicyEdit, RuleChangeError};
use crate::limiter::policy::{PolicyConfig, RuleConfig};
use crate::limiter::{Limiter, PolicySet};
use crate::store::{RedisStore, VersionKey};

/// The policies in Postgres and the version key in Redis that announces their changes; one
/// per process.
pub struct RuleStore {
    pool: PgPool,
    /// `<prefix>:limiter:version`.
    version: VersionKey,
}

/// A policy as stored, with its version: 1 when seeded, bumped by every change.
#[derive(Debug, Clone)]
pub struct StoredPolicy {
    /// The policy as written.
    pub config: PolicyConfig,
    /// Its version: 1 when seeded, bumped by every change.
    pub version: i64,
}

/// One change of a policy, as `limiter_policy_audit` records it.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    /// The policy changed.
    pub policy: String,
    /// Who changed it: the admin token's name.
    pub changed_by: String,
    /// When, on Postgres's clock.
    pub changed_at: DateTime<Utc>,
    /// The policy before.
    pub old: PolicyConfig,
    /// The policy after.
    pub new: PolicyConfig,
}

impl RuleStore {
    /// Over `pool` (the policies and their audit) and `redis` (the version key).
    pub fn new(pool: PgPool, redis: RedisStore) -> Self {
        Self {
            pool,
            version: VersionKey::new(redis, "limiter:version"),
        }
    }

    /// Stores the settings' policies where none is stored yet (first start, or a policy
    /// added to the settings later), and offers a stored policy each default rule it
    /// has not been offered before (see `Self::offer_new_rules`). What an operator
    /// changed is never overwritten.
    pub async fn seed(&self, defaults: &BTreeMap<String, PolicyConfig>) -> anyhow::Result<()> {
        for (name, config) in defaults {
            let offered: Vec<String> = config.rules.iter().map(|r| r.name.clone()).collect();
            sqlx::query!(
                "INSERT INTO limiter_policies (name, config, offered_rules) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING",
                name,
                Json(config) as _,
                &offered
            )
            .execute(&self.pool)
            .await?;
            self.offer_new_rules(name, config).await?;
        }
        Ok(())
    }

    /// An upgrade that adds a rule to a default policy reaches installations that
    /// stored the policy before: each default rule the stored policy was never offered
    /// (`offered_rules`) is added to it, unless it already has a rule of that name (an
    /// operator's, kept as it is), and is then marked offered, so a rule the operator
    /// removes later never comes back. Edited rules are not touched. The addition is a
    /// change like an operator's: a new version and an audit row by `upgrade`. If the
    /// result would not be a valid policy (more rules than a policy may have), nothing
    /// is added and the rules stay unoffered, with a warning, for a later release.
    async fn offer_new_rules(&self, name: &str, defaults: &PolicyConfig) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        let stored = sqlx::query!(
            r#"SELECT config AS "config: Json<PolicyConfig>", offered_rules FROM limiter_policies WHERE name = $1 FOR UPDATE"#,
            name
        )
        .fetch_one(&mut *tx)
        .await?;
        let new: Vec<&RuleConfig> = defaults
            .rules
            .iter()
            .filter(|rule| !stored.offered_rules.contains(&rule.name))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let old = stored.config.0;
        let mut config = old.clone();
        for rule in &new {
            if !config.rules.iter().any(|r| r.name == rule.name) {
                config.rules.push((*rule).clone());
            }
        }
        if let Err(e) = crate::limiter::Policy::parse(name, &config) {
            tracing::warn!(policy = name, error = %e, "a new default rule could not be added");
            return Ok(());
        }
        let offered: Vec<String> = new.iter().map(|rule| rule.name.clone()).collect();
        if config == old {
            sqlx::query!(
                "UPDATE limiter_policies SET offered_rules = offered_rules || $2 WHERE name = $1",
                name,
                &offered
            )
            .execute(&mut *tx)
            .await?;
        } else {
            sqlx::query!(
                "UPDATE limiter_policies SET config = $2, offered_rules = offered_rules || $3, version = version + 1, updated_at = now() WHERE name = $1",
                name,
                Json(&config) as _,
                &offered
            )
            .execute(&mut *tx)
            .await?;
            sqlx::query!(
                "INSERT INTO limiter_policy_audit (policy, changed_by, old_config, new_config) VALUES ($1, 'upgrade', $2, $3)",
                name,
                Json(&old) as _,
                Json(&config) as _
            )
            .execute(&mut *tx)
            .await?;
            tracing::info!(policy = name, rules = ?offered, "new default rules added");
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every stored policy, by name.
    pub async fn load(&self) -> anyhow::Result<BTreeMap<String, StoredPolicy>> {
        let rows = sqlx::query!(
            r#"SELECT name, config AS "config: Json<PolicyConfig>", version FROM limiter_policies"#
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                let stored = StoredPolicy {
                    config: row.config.0,
                    version: row.version,
                };
                (row.name, stored)
            })
            .collect())
    }

    /// The stored policy by that name, if any.
    pub async fn get(&self, name: &str) -> anyhow::Result<Option<StoredPolicy>> {
        let row = sqlx::query!(
            r#"SELECT config AS "config: Json<PolicyConfig>", version FROM limiter_policies WHERE name = $1"#,
            name
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|row| StoredPolicy {
            config: row.config.0,
            version: row.version,
        }))
    }

    /// Changes one policy by `edit`, merged onto the stored policy inside one
    /// transaction holding the policy's row lock, so concurrent edits of different
    /// rules all stand (each applies to the other's result, never to a stale copy).
    /// With `edit.version`, the edit is refused unless the stored version is that one
    /// (the version its author loaded): of two edits made from the same version, the
    /// second to take the lock finds the first's bump and conflicts. The result is
    /// validated as settings are, stored with a bumped version and its audit row, and
    /// announced to every instance.
    pub async fn change(
        &self,
        name: &str,
        who: &str,
        edit: &PolicyEdit,
    ) -> Result<StoredPolicy, RuleChangeError> {
        let mut tx = self.pool.begin().await.map_err(anyhow::Error::from)?;
        let old = sqlx::query!(
            r#"SELECT config AS "config: Json<PolicyConfig>", version FROM limiter_policies WHERE name = $1 FOR UPDATE"#,
            name
        )
        .fetch_optional(&mut *tx)
        .await
        .map_err(anyhow::Error::from)?
        .ok_or_else(|| RuleChangeError::UnknownPolicy(name.to_string()))?;
        if edit.version.is_some_and(|expected| expected != old.version) {
            return Err(RuleChangeError::VersionConflict {
                policy: name.to_string(),
                current: old.version,
            });
        }
        let new = edit.apply(name, old.config.0.clone())?;
        crate::limiter::Policy::parse(name, &new)?;
        let version = sqlx::query_scalar!(
            "UPDATE limiter_policies SET config = $2, version = version + 1, updated_at = now() WHERE name = $1 RETURNING version",
            name,
            Json(&new) as _
        )
        .fetch_one(&mut *tx)
        .await
        .map_err(anyhow::Error::from)?;
        sqlx::query!(
            "INSERT INTO limiter_policy_audit (policy, changed_by, old_config, new_config) VALUES ($1, $2, $3, $4)",
            name,
            who,
            Json(&old.config.0) as _,
            Json(&new) as _
        )
        .execute(&mut *tx)
        .await
        .map_err(anyhow::Error::from)?;
        tx.commit().await.map_err(anyhow::Error::from)?;
        self.bump().await;
        tracing::info!(
            policy = name,
            changed_by = who,
            version,
            "rate-limit policy changed"
        );
        Ok(StoredPolicy {
            config: new,
            version,
        })
    }

    async fn bump(&self) {
        self.version.bump().await;
    }

    async fn version(&self) -> anyhow::Result<Option<i64>> {
        self.version.get().await
    }

    /// The newest `limit` changes, of `policy` or of all policies.
    pub async fn audit(&self, policy: Option<&str>, limit: i64) -> anyhow::Result<Vec<AuditEntry>> {
        let rows = sqlx::query!(
            r#"SELECT policy, changed_by, changed_at,
                      old_config AS "old: Json<PolicyConfig>", new_config AS "new: Json<PolicyConfig>"
               FROM limiter_policy_audit
               WHERE ($1::text IS NULL OR policy = $1)
               ORDER BY changed_at DESC, id DESC LIMIT $2"#,
            policy,
            limit
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| AuditEntry {
                policy: r.policy,
                changed_by: r.changed_by,
                changed_at: r.changed_at,
                old: r.old.0,
                new: r.new.0,
            })
            .collect())
    }

    /// Loads the stored rules into `limiter`.
    pub async fn apply(&self, limiter: &Limiter) -> anyhow::Result<()> {
        let configs = self
            .load()
            .await?
            .into_iter()
            .map(|(name, stored)| (name, stored.config))
            .collect();
        let set = PolicySet::parse(&configs)
            .map_err(|e| anyhow::anyhow!("stored rate-limit policies are invalid: {e}"))?;
        limiter.replace_policies(set);
        Ok(())
    }
}

/// Polls the version key every `every` and reloads the rules when it moves
/// ([`crate::background::watch_version`]: also every 30 s regardless, and every 5 s
/// while Redis cannot say).
pub async fn watch(store: Arc<RuleStore>, limiter: Arc<Limiter>, every: Duration) {
    crate::background::watch_version(
        "rule watcher",
        every,
        || store.version(),
        || async {
            store
                .apply(&limiter)
                .await
                .context("could not reload rate-limit rules")
        },
    )
    .await
}
