//! Before the load: the item to buy (created through the admin API and waited for
//! until every instance lists it) and a dev-login token for each user.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;

/// Creates the load's item, on sale from a minute ago for an hour; its id.
pub async fn create_item(
    client: &reqwest::Client,
    target: &str,
    stock: i64,
    admin_token: &str,
) -> anyhow::Result<i64> {
    let starts_at = chrono::Utc::now() - chrono::Duration::minutes(1);
    create_item_starting(
        client,
        target,
        admin_token,
        "loadgen item",
        stock,
        starts_at,
    )
    .await
}

/// Creates an item named `name` (`POST /admin/api/items`) whose sale runs from
/// `starts_at` for an hour, at 1.00; its id.
pub async fn create_item_starting(
    client: &reqwest::Client,
    target: &str,
    admin_token: &str,
    name: &str,
    stock: i64,
    starts_at: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<i64> {
    let response = client
        .post(format!("{target}/admin/api/items"))
        .bearer_auth(admin_token)
        .json(&serde_json::json!({
            "name": name,
            "priceCents": 100,
            "stock": stock,
            "startsAt": starts_at,
            "endsAt": starts_at + chrono::Duration::hours(1),
        }))
        .send()
        .await
        .context("creating the item")?;
    anyhow::ensure!(
        response.status() == 201,
        "creating the item: {}",
        response.status()
    );
    let body: serde_json::Value = response.json().await?;
    body["id"].as_i64().context("item id in the answer")
}

/// Instances reload their item catalog every second: wait until each one lists the item.
/// A target without a catalog (`/api/items` is 404: the bench's ceiling server) is not
/// waited for.
pub async fn wait_until_listed(
    client: &reqwest::Client,
    targets: &[String],
    item: i64,
) -> anyhow::Result<()> {
    wait_until_listed_as(client, targets, item, None).await
}

/// [`wait_until_listed`], and with its waiting room on or off as `room` says, when it
/// says (catalog and rooms are reloaded every second).
pub async fn wait_until_listed_as(
    client: &reqwest::Client,
    targets: &[String],
    item: i64,
    room: Option<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(15);
    for target in targets {
        loop {
            let listed = async {
                let response = client
                    .get(format!("{target}/api/items"))
                    .send()
                    .await
                    .ok()?;
                if response.status() == 404 {
                    return Some(true);
                }
                let body: serde_json::Value = response.json().await.ok()?;
                body["items"]
                    .as_array()?
                    .iter()
                    .find(|i| i["id"].as_i64() == Some(item))
                    .map(|i| room.is_none_or(|room| i["waitingRoom"].as_bool() == Some(room)))
            };
            if listed.await == Some(true) {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{target} does not list item {item} (waiting room {room:?})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// A dev-login token for each of `users`, from `target`'s `POST /api/session`.
pub async fn login(
    client: &reqwest::Client,
    target: &str,
    users: impl Iterator<Item = i64>,
) -> anyhow::Result<HashMap<i64, String>> {
    let fetched: Vec<anyhow::Result<(i64, String)>> = futures_util::stream::iter(users)
        .map(|user| async move {
            let response = client
                .post(format!("{target}/api/session"))
                .json(&serde_json::json!({ "userId": user }))
                .send()
                .await
                .context("dev login")?;
            anyhow::ensure!(
                response.status() == 200,
                "dev login for user {user}: {}",
                response.status()
            );
            let body: serde_json::Value = response.json().await?;
            Ok((user, body["token"].as_str().context("token")?.to_string()))
        })
        .buffer_unordered(64)
        .collect()
        .await;
    fetched.into_iter().collect()
}
