//! The policies as the service runs them, read through its admin API: the side load's
//! rules (`side`) and the purchases' limits (`limits`) come from there, never from a
//! copy of the defaults.

use anyhow::Context;
use serde::Deserialize;

/// A policy as `GET /admin/api/policies/{name}` answers it (the fields the checks use).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Policy {
    pub(crate) name: String,
    pub(crate) algorithm: String,
    pub(crate) fail_mode: String,
    pub(crate) enabled: bool,
    pub(crate) rules: Vec<Rule>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Rule {
    pub(crate) name: String,
    /// `"user"`, `"ip"`, `"client_id"`, `"route"` or `{"literal": …}`.
    pub(crate) key: serde_json::Value,
    pub(crate) window_ms: u64,
    pub(crate) threshold: u64,
    #[serde(default)]
    pub(crate) shadow: bool,
}

impl Policy {
    /// `GET /admin/api/policies/{name}` of `target`.
    pub(crate) async fn read(
        client: &reqwest::Client,
        target: &str,
        admin_token: &str,
        name: &str,
    ) -> anyhow::Result<Self> {
        let response = client
            .get(format!("{target}/admin/api/policies/{name}"))
            .bearer_auth(admin_token)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("reading policy {name}"))?;
        Ok(response.json().await?)
    }
}
