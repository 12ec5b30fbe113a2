//! The instances a waiting-room run talks to, and what it asks of them besides the
//! shoppers' requests: an item whose sale starts when the scenario says, its room's
//! settings and figures (the admin API), the listing that says every instance has read
//! them, and an instance's counters from `/metrics`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use loadtest_core::client::{client, loopback};
pub use loadtest_core::room::RoomSettings;
use serde::Deserialize;

/// The instances under test and the two HTTP clients of a run.
pub struct Site {
    /// Base URLs (`http://127.0.0.1:PORT`), loopback only.
    pub targets: Vec<String>,
    pub admin_token: String,
    /// Keep-alive: the admin's calls, the bots, the closed loops.
    pub(crate) client: reqwest::Client,
    /// A new connection per request: a human polls every 6 s, after the server closed
    /// the idle connection (keep-alive 5 s), so each poll connects again.
    pub(crate) fresh: reqwest::Client,
}

/// An instance's view of a room (`status` of `GET /admin/api/items/{id}/waiting-room`).
#[derive(Debug, Clone, Copy, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoomFigures {
    pub joined: u64,
    pub waiting: u64,
    pub serving: u64,
    pub admitted: u64,
    pub live_passes: u64,
    pub abandoned: u64,
    pub sold_out: bool,
}

impl Site {
    pub fn new(targets: &[String], admin_token: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(!targets.is_empty(), "at least one target");
        let targets: Vec<String> = targets
            .iter()
            .map(|t| t.trim_end_matches('/').to_string())
            .collect();
        for target in &targets {
            loopback(target)?;
        }
        let fresh = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(0)
            .tcp_nodelay(true)
            .build()?;
        Ok(Self {
            targets,
            admin_token: admin_token.to_string(),
            client: client()?,
            fresh,
        })
    }

    /// Creates an item whose sale runs from `starts_at` for an hour; its id.
    pub async fn create_item(&self, stock: i64, starts_at: DateTime<Utc>) -> anyhow::Result<i64> {
        loadtest_core::setup::create_item_starting(
            &self.client,
            &self.targets[0],
            &self.admin_token,
            "waiting-room bench",
            stock,
            starts_at,
        )
        .await
    }

    /// Turns `item`'s room on with these settings (`PUT /admin/api/items/{item}/waiting-room`).
    pub async fn set_room(&self, item: i64, settings: &RoomSettings) -> anyhow::Result<()> {
        let target = &self.targets[0];
        loadtest_core::room::set_room(&self.client, target, &self.admin_token, item, settings).await
    }

    /// The room's figures as instance `target` sees them.
    pub async fn room(&self, target: usize, item: i64) -> anyhow::Result<RoomFigures> {
        #[derive(Deserialize)]
        struct Body {
            status: RoomFigures,
        }
        let body: Body = self
            .client
            .get(format!(
                "{}/admin/api/items/{item}/waiting-room",
                self.targets[target]
            ))
            .bearer_auth(&self.admin_token)
            .timeout(Duration::from_secs(2))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(body.status)
    }

    /// Waits until every instance lists `item` (catalog and rooms are reloaded every
    /// second), with its room on when `room`.
    pub async fn until_listed(&self, item: i64, room: bool) -> anyhow::Result<()> {
        loadtest_core::setup::wait_until_listed_as(&self.client, &self.targets, item, Some(room))
            .await
    }

    /// Instance `target`'s `/metrics` text, or `None` when it does not answer.
    pub async fn metrics(&self, target: usize) -> Option<String> {
        let response = self
            .client
            .get(format!("{}/metrics", self.targets[target]))
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        response.error_for_status().ok()?.text().await.ok()
    }
}

/// The sum of a counter family's samples in a `/metrics` text, those carrying every
/// `label="value"` given; 0 when absent.
pub fn counter(text: &str, family: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, rest) = series.split_once('{').unwrap_or((series, ""));
            (name == family
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

/// Redis calls the waiting room made (`seckill_redis_calls_total{purpose="queue"}`).
pub fn queue_calls(text: &str) -> f64 {
    counter(text, "seckill_redis_calls_total", &[("purpose", "queue")])
}

/// Purchases whose pass bought a unit (`seckill_queue_passes_total{outcome="used"}`).
pub fn passes_used(text: &str) -> f64 {
    counter(text, "seckill_queue_passes_total", &[("outcome", "used")])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_over_the_series_that_carry_the_labels() {
        let text = "# HELP x\n\
            seckill_redis_calls_total{purpose=\"queue\",outcome=\"ok\"} 7\n\
            seckill_redis_calls_total{purpose=\"queue\",outcome=\"error\"} 1\n\
            seckill_redis_calls_total{purpose=\"limiter\",outcome=\"ok\"} 100\n\
            seckill_queue_joins_total 3\n";
        assert_eq!(queue_calls(text), 8.0);
        assert_eq!(counter(text, "seckill_queue_joins_total", &[]), 3.0);
        assert_eq!(counter(text, "seckill_missing_total", &[]), 0.0);
    }
}
