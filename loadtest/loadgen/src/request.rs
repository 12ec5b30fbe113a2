//! One request of the load: whose it is, where it goes, what it asks, and what came
//! back, written to the ledger.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use loadtest_core::client::{ip_of, Failure};
use loadtest_core::ledger::Record;

use crate::config::Config;

/// What every request of a run shares: the client, the run's settings, the tokens and
/// the ledger the answers go to.
pub(crate) struct Shared {
    pub(crate) client: reqwest::Client,
    pub(crate) config: Config,
    pub(crate) tokens: Arc<HashMap<i64, String>>,
    /// User `i` buys `item_ids[i % len]`.
    pub(crate) item_ids: Vec<i64>,
    pub(crate) purchase_path: String,
    pub(crate) first_ip: u32,
    pub(crate) start: Instant,
    pub(crate) ledger: Arc<Mutex<Vec<Record>>>,
}

impl Shared {
    pub(crate) async fn fire(&self, n: u64) {
        let index = (n % u64::from(self.config.users)) as u32;
        let user = self.config.first_user + i64::from(index);
        let ip = self.first_ip.wrapping_add(index % self.config.ips);
        let target_index = (n % self.config.targets.len() as u64) as usize;
        let target = &self.config.targets[target_index];
        let token = self
            .tokens
            .get(&user)
            .map(String::as_str)
            .unwrap_or_default();
        let request = match &self.config.probe {
            Some(path) => self.client.get(format!("{target}{path}")),
            None => self
                .client
                .post(format!("{target}{}", self.purchase_path))
                .bearer_auth(token)
                .json(&serde_json::json!({
                    "itemId": self.item_ids[index as usize % self.item_ids.len()]
                })),
        };
        let sent = self.start.elapsed();
        let response = request.header("X-Forwarded-For", ip_of(ip)).send().await;
        let mut record = Record {
            target: target_index,
            user,
            ip,
            sent,
            received: sent,
            status: 0,
            code: None,
            dimension: None,
            admitted: false,
            failure: None,
            order_id: None,
        };
        match response {
            Ok(response) => {
                record.status = response.status().as_u16();
                record.admitted = record.status != 429
                    && response.headers().contains_key("x-ratelimit-remaining");
                match response.bytes().await {
                    Ok(body) => {
                        let body: serde_json::Value =
                            serde_json::from_slice(&body).unwrap_or_default();
                        record.code = body["code"].as_str().map(str::to_string);
                        record.dimension = body["dimension"].as_str().map(str::to_string);
                        record.order_id = body["orderId"].as_str().map(str::to_string);
                    }
                    Err(e) => {
                        // The body never arrived whole: whatever the status said, the
                        // outcome is unknown.
                        record.status = 0;
                        record.admitted = false;
                        record.failure = Some(Failure::of(&e).or_lost());
                    }
                }
            }
            Err(e) => record.failure = Some(Failure::of(&e)),
        }
        record.received = self.start.elapsed();
        if let Ok(mut ledger) = self.ledger.lock() {
            ledger.push(record);
        }
    }
}
