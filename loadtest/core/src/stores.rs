//! After the run: what Postgres and Redis hold for the item, against what the answers
//! said. Every 200 must name an order row of its user, no user may hold two live orders,
//! the stock may not be oversold, and Redis (stock, pending reservations, buyers, success
//! counter) must agree with Postgres: live orders, and released ones whose unit Redis has
//! not got back yet, hold a unit each.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::ledger::Record;
use crate::report::Check;

/// Where to look after the run: Postgres and Redis of the instances under test.
#[derive(Debug, Clone)]
pub struct Stores {
    pub database_url: String,
    /// One server's URL, or a cluster's node URLs separated by commas.
    pub redis_url: String,
    pub redis_prefix: String,
}

pub async fn order_count(stores: &Stores, item: i64) -> anyhow::Result<i64> {
    let pool = sqlx::PgPool::connect(&stores.database_url)
        .await
        .context("connecting to Postgres")?;
    let count = sqlx::query_scalar("SELECT count(*) FROM orders WHERE item_id = $1")
        .bind(item)
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    Ok(count)
}

/// The item's units left, as Postgres counts them (`items.remaining_stock`).
pub async fn remaining_stock(stores: &Stores, item: i64) -> anyhow::Result<i64> {
    let pool = sqlx::PgPool::connect(&stores.database_url)
        .await
        .context("connecting to Postgres")?;
    let remaining: i32 = sqlx::query_scalar("SELECT remaining_stock FROM items WHERE id = $1")
        .bind(item)
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    Ok(i64::from(remaining))
}

/// What Redis holds about one item.
struct RedisSide {
    stock: Option<i64>,
    pending: i64,
    buyers: i64,
    success: Option<i64>,
}

pub async fn store_checks(
    stores: &Stores,
    item: i64,
    orders_before: i64,
    records: &[Record],
) -> anyhow::Result<Vec<Check>> {
    let pool = sqlx::PgPool::connect(&stores.database_url)
        .await
        .context("connecting to Postgres")?;
    // Every order with whether it is live (pending payment or paid) and whether it
    // still holds a unit in Redis (a released one whose give-back has not happened).
    let rows: Vec<(String, i64, bool, bool)> = sqlx::query_as(
        "SELECT id::text, user_id, state IN ('pending_payment', 'paid'), returned_at IS NULL
         FROM orders WHERE item_id = $1",
    )
    .bind(item)
    .fetch_all(&pool)
    .await?;
    let (total, remaining): (i32, i32) =
        sqlx::query_as("SELECT total_stock, remaining_stock FROM items WHERE id = $1")
            .bind(item)
            .fetch_one(&pool)
            .await?;
    pool.close().await;
    let orders = rows.len() as i64;
    let live = rows.iter().filter(|r| r.2).count() as i64;
    let held = rows.iter().filter(|r| r.3).count() as i64;
    let owner: HashMap<&str, i64> = rows
        .iter()
        .map(|(id, user, ..)| (id.as_str(), *user))
        .collect();
    let mut per_user: HashMap<i64, u32> = HashMap::new();
    for (_, user, ..) in rows.iter().filter(|r| r.2) {
        *per_user.entry(*user).or_default() += 1;
    }
    let doubles = per_user.values().filter(|&&n| n > 1).count();
    // Only real 200s: a lost answer may or may not have placed an order.
    let oks: Vec<&Record> = records.iter().filter(|r| r.status == 200).collect();
    let orphans: Vec<&Record> = oks
        .iter()
        .filter(|r| {
            r.order_id
                .as_deref()
                .and_then(|id| owner.get(id))
                .is_none_or(|&user| user != r.user)
        })
        .copied()
        .collect();
    let orphan_count = orphans.len();
    let orphans: Vec<String> = orphans
        .iter()
        .take(5)
        .map(|r| {
            format!(
                "user {} order {}",
                r.user,
                r.order_id.as_deref().unwrap_or("?")
            )
        })
        .collect();

    let redis = redis_side(stores, item).await?;
    let new_orders = orders - orders_before;
    let ok = oks.len() as i64;
    // Answers that may stand for an order: lost ones, and 202 ORDER_PENDING (its
    // commit may yet land).
    let maybe = records
        .iter()
        .filter(|r| (r.status == 0 && r.possibly_admitted()) || r.status == 202)
        .count() as i64;
    let stock = redis.stock.unwrap_or(-1);
    let success = redis.success.unwrap_or(0);
    Ok(vec![
        Check {
            name: "orders match 200 answers".into(),
            passed: (ok..=ok + maybe).contains(&new_orders),
            detail: format!(
                "{new_orders} new orders in Postgres, {ok} answers 200, {maybe} outcomes unknown or pending"
            ),
        },
        Check {
            name: "every 200 has its order".into(),
            passed: orphan_count == 0,
            detail: if orphan_count == 0 {
                format!("all {ok} answers 200 name an order of their user in Postgres")
            } else {
                format!("{orphan_count} answers 200 without their order row, e.g. {}", orphans.join(", "))
            },
        },
        Check {
            name: "one order per user".into(),
            passed: doubles == 0,
            detail: format!("{doubles} users with two or more live orders of item {item}"),
        },
        Check {
            name: "no oversell".into(),
            passed: live <= i64::from(total)
                && live + i64::from(remaining) == i64::from(total)
                && stock >= 0,
            detail: format!(
                "{live} live orders ({orders} in all) of a stock of {total}; postgres remaining {remaining}, redis stock {stock}"
            ),
        },
        Check {
            name: "stock consistent".into(),
            passed: stock + redis.pending + held == i64::from(total)
                && stock == i64::from(remaining) - (held - live)
                && stock >= 0,
            detail: format!(
                "redis stock {stock} + pending {} + orders holding a unit {held} vs total {total}; postgres remaining {remaining}",
                redis.pending
            ),
        },
        Check {
            name: "redis buyers match orders".into(),
            passed: redis.pending > 0 || (redis.buyers == held && success == held),
            detail: format!(
                "redis buyers {} and success counter {success} vs {held} orders holding a unit in postgres ({} pending)",
                redis.buyers, redis.pending
            ),
        },
    ])
}

/// Waits until Redis holds no pending reservation of `item` and then for one whole
/// reconciler round after that (the sum of `seckill_reconciler_rounds_total` over the
/// targets grows by two: the round running when we looked may have started earlier),
/// so the store checks judge Redis as the reconciler leaves it. Says what it waited for.
pub async fn await_reconciliation(
    client: &reqwest::Client,
    targets: &[String],
    stores: &Stores,
    item: i64,
    limit: Duration,
) -> anyhow::Result<String> {
    let started = Instant::now();
    let deadline = started + limit;
    loop {
        if redis_side(stores, item).await?.pending == 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "reservations still pending after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let first = rounds(client, targets).await?;
    loop {
        let now = rounds(client, targets).await?;
        if now >= first + 2 {
            return Ok(format!(
                "nothing pending, then reconciler rounds {first} -> {now} in {:.1} s",
                started.elapsed().as_secs_f64()
            ));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no reconciler round within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reconciler rounds finished, summed over the targets' `/metrics`.
async fn rounds(client: &reqwest::Client, targets: &[String]) -> anyhow::Result<u64> {
    let mut sum = 0;
    for target in targets {
        let text = client
            .get(format!("{target}/metrics"))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("{target}/metrics"))?
            .text()
            .await?;
        sum += text
            .lines()
            .find_map(|l| l.strip_prefix("seckill_reconciler_rounds_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .with_context(|| format!("{target}/metrics has no seckill_reconciler_rounds_total"))?
            as u64;
    }
    Ok(sum)
}

async fn redis_side(stores: &Stores, item: i64) -> anyhow::Result<RedisSide> {
    let base = format!("{}:{{item:{item}}}", stores.redis_prefix);
    Ok(if stores.redis_url.contains(',') {
        let nodes: Vec<&str> = stores.redis_url.split(',').map(str::trim).collect();
        let mut redis = redis::cluster::ClusterClient::new(nodes)?
            .get_async_connection()
            .await?;
        read_side(&mut redis, &base).await?
    } else {
        let mut redis = redis::Client::open(stores.redis_url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        read_side(&mut redis, &base).await?
    })
}

/// An item's keys (`base` is their prefix), read in one pipeline (one slot).
async fn read_side(
    redis: &mut impl redis::aio::ConnectionLike,
    base: &str,
) -> redis::RedisResult<RedisSide> {
    let (stock, pending, buyers, success) = redis::pipe()
        .get(format!("{base}:stock"))
        .zcard(format!("{base}:pending"))
        .scard(format!("{base}:buyers"))
        .get(format!("{base}:success"))
        .query_async(redis)
        .await?;
    Ok(RedisSide {
        stock,
        pending,
        buyers,
        success,
    })
}
