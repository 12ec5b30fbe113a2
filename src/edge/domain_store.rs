//! The edge domains as operators run them: stored in Postgres (`rls_domains`, with an
//! `rls_domain_audit` row per change in the same transaction), seeded from the YAML
//! files only where no domain of that name is stored, edited live with versions (an
//! edit made from an older version is refused), and announced by bumping
//! `<prefix>:rls:version`. Every instance polls that key every 500 ms and reloads the
//! whole table when it moves (`background::watch_version`, as the rate-limit rules do),
//! so an edit is in force everywhere within about half a second. [`DomainStore::current`]
//! is what the engine reads: this instance's copy, swapped whole.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::PgPool;

use super::domain_document::{check_domain, DocumentError, DomainDocument};
use super::domain_files::DomainFile;
use super::domain_limits::DomainLimits;
use crate::store::{RedisStore, VersionKey};

/// Most domains stored: each is a hash tag in Redis and a metric label.
pub const MAX_DOMAINS: i64 = 1_000;

/// The advisory lock a creation takes, so that two at once cannot pass
/// [`MAX_DOMAINS`] together.
const CREATE_LOCK: i64 = 0x72_6c73_5f64_6f6d; // "rls_dom"

/// Who the audit names for a domain seeded from its file.
pub const SEEDED_BY: &str = "seed";

/// A domain as stored.
#[derive(Debug, Clone)]
pub struct StoredDomain {
    /// Its document, checked.
    pub document: DomainDocument,
    /// 1 when created, bumped by every change.
    pub version: i64,
    /// Who changed it last: the admin token's name, or `seed`.
    pub updated_by: String,
    /// When, on Postgres's clock.
    pub updated_at: DateTime<Utc>,
}

/// One domain of the list: its name and version.
#[derive(Debug, Clone)]
pub struct DomainSummary {
    /// The domain.
    pub domain: String,
    /// Its version.
    pub version: i64,
    /// Who changed it last.
    pub updated_by: String,
    /// When.
    pub updated_at: DateTime<Utc>,
}

/// A domain in force on this instance: its document, compiled for lookups, and the
/// version they are.
#[derive(Debug, Clone)]
pub struct LoadedDomain {
    /// The document as stored.
    pub document: Arc<DomainDocument>,
    /// Its limits, ready for `DomainLimits::find`.
    pub limits: Arc<DomainLimits>,
    /// Its version.
    pub version: i64,
}

/// Why a domain's change was refused or failed; each maps to one API error.
#[derive(Debug, thiserror::Error)]
pub enum DomainChangeError {
    /// The document (or the path's domain) fails its checks; `field` names where.
    #[error(transparent)]
    Invalid(#[from] DocumentError),
    /// No domain by that name (a delete, or an edit made from a version of a domain
    /// deleted since).
    #[error("no domain named {0:?}")]
    Unknown(String),
    /// The change was made from another version than the stored one.
    #[error("domain {domain:?} is at version {current}, not the one this change was made from")]
    VersionConflict {
        /// The domain changed.
        domain: String,
        /// The version it is at now.
        current: i64,
    },
    /// [`MAX_DOMAINS`] are stored already.
    #[error("at most {MAX_DOMAINS} domains are stored; delete one first")]
    TooMany,
    /// Postgres failed; nothing was changed.
    #[error(transparent)]
    Store(#[from] anyhow::Error),
}

/// The domains in Postgres, their version key, and this instance's copy.
pub struct DomainStore {
    pool: PgPool,
    /// `<prefix>:rls:version`.
    version: VersionKey,
    current: ArcSwap<HashMap<String, LoadedDomain>>,
}

impl DomainStore {
    /// Over `pool` (the domains and their audit) and `redis` (the version key); holds no
    /// domain until [`Self::reload`].
    pub fn new(pool: PgPool, redis: RedisStore) -> Self {
        Self {
            pool,
            version: VersionKey::new(redis, "rls:version"),
            current: ArcSwap::from_pointee(HashMap::new()),
        }
    }

    /// The domain in force on this instance, if any.
    pub fn current(&self, domain: &str) -> Option<LoadedDomain> {
        self.current.load().get(domain).cloned()
    }

    /// Stores each file's domain where none of its name is stored (audited as a
    /// creation by `seed`); a stored domain, edited or not, is never overwritten.
    /// Returns the domains created.
    pub async fn seed(&self, files: &[DomainFile]) -> anyhow::Result<Vec<String>> {
        let mut created = Vec::new();
        for file in files {
            let document = &file.document;
            let mut tx = self.pool.begin().await?;
            lock_creations(&mut tx).await?;
            if count(&mut tx).await? >= MAX_DOMAINS {
                anyhow::bail!(
                    "{}: at most {MAX_DOMAINS} domains are stored",
                    file.path.display()
                );
            }
            if insert(&mut tx, document, SEEDED_BY).await?.is_some() {
                created.push(document.domain.clone());
            }
            tx.commit().await?;
        }
        if !created.is_empty() {
            tracing::info!(domains = ?created, "edge domains seeded from their files");
            self.version.bump().await;
            self.reload_here().await;
        }
        Ok(created)
    }

    /// Every stored domain, by name.
    pub async fn list(&self) -> anyhow::Result<Vec<DomainSummary>> {
        let rows = sqlx::query!(
            "SELECT domain, version, updated_by, updated_at FROM rls_domains ORDER BY domain"
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| DomainSummary {
                domain: r.domain,
                version: r.version,
                updated_by: r.updated_by,
                updated_at: r.updated_at,
            })
            .collect())
    }

    /// The stored domain by that name, if any.
    pub async fn get(&self, domain: &str) -> anyhow::Result<Option<StoredDomain>> {
        let row = sqlx::query!(
            r#"SELECT document AS "document: Json<DomainDocument>", version, updated_by, updated_at
               FROM rls_domains WHERE domain = $1"#,
            domain
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.map(|r| StoredDomain {
            document: r.document.0,
            version: r.version,
            updated_by: r.updated_by,
            updated_at: r.updated_at,
        }))
    }

    /// Creates or replaces `domain` with `document` (checked, and naming the same
    /// domain), audited in the same transaction, and announces it. With `expected`, the
    /// domain must be stored at that version (else `VersionConflict`, or `Unknown` when
    /// it is not stored at all). Returns the domain as stored and whether it was created.
    pub async fn put(
        &self,
        domain: &str,
        who: &str,
        document: &DomainDocument,
        expected: Option<i64>,
    ) -> Result<(StoredDomain, bool), DomainChangeError> {
        check_domain(domain)?;
        if document.domain != domain {
            return Err(DocumentError {
                field: "domain".into(),
                reason: format!(
                    "the document's domain {:?} is not the path's {domain:?}",
                    document.domain
                ),
            }
            .into());
        }
        document.check()?;
        let mut tx = self.pool.begin().await.map_err(anyhow::Error::from)?;
        let mut old = locked(&mut tx, domain).await?;
        if old.is_none() {
            if expected.is_some() {
                return Err(DomainChangeError::Unknown(domain.into()));
            }
            // Creations take turns: one of this name committed while this one waited is
            // replaced, as a PUT without `If-Match` replaces whatever is stored.
            lock_creations(&mut tx).await?;
            old = locked(&mut tx, domain).await?;
        }
        let (row, created) = match old {
            Some(old) => {
                at_version(domain, expected, old.version)?;
                let row = sqlx::query!(
                    "UPDATE rls_domains SET document = $2, version = version + 1, updated_by = $3, updated_at = now() WHERE domain = $1 RETURNING version, updated_at",
                    domain,
                    Json(document) as _,
                    who
                )
                .fetch_one(&mut *tx)
                .await
                .map_err(anyhow::Error::from)?;
                audit(
                    &mut tx,
                    domain,
                    "update",
                    row.version,
                    Some(&old.document),
                    Some(document),
                    who,
                )
                .await?;
                ((row.version, row.updated_at), false)
            }
            None => {
                if count(&mut tx).await? >= MAX_DOMAINS {
                    return Err(DomainChangeError::TooMany);
                }
                let row = insert(&mut tx, document, who)
                    .await?
                    .context("a domain created while creations were locked")?;
                ((row.version, row.updated_at), true)
            }
        };
        tx.commit().await.map_err(anyhow::Error::from)?;
        self.version.bump().await;
        self.reload_here().await;
        let (version, updated_at) = row;
        tracing::info!(
            domain,
            changed_by = who,
            version,
            created,
            "edge domain changed"
        );
        let stored = StoredDomain {
            document: document.clone(),
            version,
            updated_by: who.into(),
            updated_at,
        };
        Ok((stored, created))
    }

    /// Deletes `domain` (with `expected`, only at that version), audited, and announces
    /// it. Returns the version deleted.
    pub async fn delete(
        &self,
        domain: &str,
        who: &str,
        expected: Option<i64>,
    ) -> Result<i64, DomainChangeError> {
        check_domain(domain)?;
        let mut tx = self.pool.begin().await.map_err(anyhow::Error::from)?;
        let old = locked(&mut tx, domain)
            .await?
            .ok_or_else(|| DomainChangeError::Unknown(domain.into()))?;
        at_version(domain, expected, old.version)?;
        sqlx::query!("DELETE FROM rls_domains WHERE domain = $1", domain)
            .execute(&mut *tx)
            .await
            .map_err(anyhow::Error::from)?;
        audit(
            &mut tx,
            domain,
            "delete",
            old.version,
            Some(&old.document),
            None,
            who,
        )
        .await?;
        tx.commit().await.map_err(anyhow::Error::from)?;
        self.version.bump().await;
        self.reload_here().await;
        tracing::info!(
            domain,
            changed_by = who,
            version = old.version,
            "edge domain deleted"
        );
        Ok(old.version)
    }

    /// Reads every stored domain and swaps this instance's copy for them. A stored
    /// document that no longer passes the checks (a later release's stricter ones) is
    /// left out with a warning rather than failing every other domain.
    pub async fn reload(&self) -> anyhow::Result<()> {
        let rows = sqlx::query!(
            r#"SELECT domain, document AS "document: Json<serde_json::Value>", version FROM rls_domains"#
        )
        .fetch_all(&self.pool)
        .await
        .context("reading the edge domains")?;
        let mut domains = HashMap::with_capacity(rows.len());
        for row in rows {
            let document = serde_json::from_value::<DomainDocument>(row.document.0)
                .map_err(|e| e.to_string())
                .and_then(|document| {
                    document.check().map_err(|e| e.to_string())?;
                    Ok(document)
                });
            match document {
                Ok(document) => {
                    let loaded = LoadedDomain {
                        limits: Arc::new(DomainLimits::new(&document)),
                        document: Arc::new(document),
                        version: row.version,
                    };
                    domains.insert(row.domain, loaded);
                }
                Err(reason) => {
                    tracing::warn!(domain = row.domain, %reason, "a stored edge domain is invalid and not in force");
                }
            }
        }
        self.current.store(Arc::new(domains));
        Ok(())
    }

    /// Reloads this instance's copy after its own change, so the instance that answered
    /// the change's 200 decides by it from then on; the others follow on the version's
    /// next poll. A failed read is left to that poll.
    async fn reload_here(&self) {
        if let Err(error) = self.reload().await {
            tracing::warn!(error = %error, "reloading the edge domains after a change");
        }
    }

    /// Reloads the domains whenever their version moves, polled every `every`
    /// (`background::watch_version`), for as long as the server runs.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        crate::background::watch_version(
            "edge domain watcher",
            every,
            || self.version.get(),
            || self.reload(),
        )
        .await
    }
}

/// A stored domain's document and version, read under its row lock.
struct Locked {
    document: DomainDocument,
    version: i64,
}

/// The stored domain, its row locked until the transaction ends (the change's
/// version check and write see no other change in between).
async fn locked(
    tx: &mut sqlx::PgConnection,
    domain: &str,
) -> Result<Option<Locked>, DomainChangeError> {
    let row = sqlx::query!(
        r#"SELECT document AS "document: Json<DomainDocument>", version FROM rls_domains WHERE domain = $1 FOR UPDATE"#,
        domain
    )
    .fetch_optional(&mut *tx)
    .await
    .map_err(anyhow::Error::from)?;
    Ok(row.map(|row| Locked {
        document: row.document.0,
        version: row.version,
    }))
}

/// Refuses a change made from another version than `current` (`expected`: the version
/// its author loaded, if they said).
fn at_version(domain: &str, expected: Option<i64>, current: i64) -> Result<(), DomainChangeError> {
    if expected.is_some_and(|expected| expected != current) {
        return Err(DomainChangeError::VersionConflict {
            domain: domain.into(),
            current,
        });
    }
    Ok(())
}

/// The version and time of a row written.
struct Written {
    version: i64,
    updated_at: DateTime<Utc>,
}

/// Stores a new domain with its audit row, under [`lock_creations`]; `None` when one of
/// its name is stored already (a file's domain then stays as stored).
async fn insert(
    tx: &mut sqlx::PgConnection,
    document: &DomainDocument,
    who: &str,
) -> anyhow::Result<Option<Written>> {
    let row = sqlx::query!(
        "INSERT INTO rls_domains (domain, document, updated_by) VALUES ($1, $2, $3) ON CONFLICT (domain) DO NOTHING RETURNING version, updated_at",
        document.domain,
        Json(document) as _,
        who
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    audit(
        tx,
        &document.domain,
        "create",
        row.version,
        None,
        Some(document),
        who,
    )
    .await?;
    Ok(Some(Written {
        version: row.version,
        updated_at: row.updated_at,
    }))
}

/// Serialises creations (see [`CREATE_LOCK`]) until the transaction ends.
async fn lock_creations(tx: &mut sqlx::PgConnection) -> anyhow::Result<()> {
    sqlx::query!("SELECT pg_advisory_xact_lock($1)", CREATE_LOCK)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

async fn count(tx: &mut sqlx::PgConnection) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM rls_domains"#)
            .fetch_one(&mut *tx)
            .await?,
    )
}

async fn audit(
    tx: &mut sqlx::PgConnection,
    domain: &str,
    action: &str,
    version: i64,
    old: Option<&DomainDocument>,
    new: Option<&DomainDocument>,
    who: &str,
) -> anyhow::Result<()> {
    sqlx::query!(
        "INSERT INTO rls_domain_audit (domain, action, version, old_document, new_document, changed_by) VALUES ($1, $2, $3, $4, $5, $6)",
        domain,
        action,
        version,
        old.map(Json) as _,
        new.map(Json) as _,
        who
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}
