//! loadgen in room mode: the item's waiting room on, shoppers who join, poll at the poll
//! budget's pace and buy with their pass, beside raiders purchasing without one; the run
//! passes its checks, what the clients saw is what Postgres holds, and the sale's report
//! (`GET /admin/api/items/{id}/report`, from the history the stream and the fold wrote)
//! agrees with both.

use std::time::Duration;

use loadgen::{ItemChoice, Load, Options, RoomPlan};
use seckill::configuration::Settings;
use sqlx::PgPool;

use seckill_test_support::{eventually, json, out_of_reach_budgets, pg_orders, spawn_app_with};

use crate::loadgen::config;

const SHOPPERS: u32 = 20;

#[sqlx::test]
async fn a_sale_through_the_room_agrees_with_postgres_and_refuses_by_each_dimension(db: PgPool) {
    let app = spawn_app_with(&db, |s| {
        out_of_reach_budgets(s);
        // The poll budget as it ships (the test settings put it out of reach): loadgen's
        // pace must stay within it.
        let shipped = Settings::default();
        s.queue_poll_burst = shipped.queue_poll_burst;
        s.queue_poll_every_ms = shipped.queue_poll_every_ms;
    })
    .await;
    let mut raid = config(&app);
    // One unit more than the shoppers: the sale never sells out, so every raider's
    // purchase reaches the limiter (the sold-out answer comes before it) whatever the
    // machine's speed, and the refusals below are counts, not a race.
    raid.item = ItemChoice::Create {
        stock: i64::from(SHOPPERS) + 1,
    };
    // Raiders: 20 users, four purchases each without a pass, users i and i + 15 behind
    // address i (so five addresses carry two users).
    raid.users = 20;
    raid.ips = 15;
    raid.max_requests = Some(80);
    raid.load = Load::Concurrency(8);
    raid.duration = Duration::from_secs(20);
    let plan = RoomPlan {
        shoppers: SHOPPERS,
        admit_per_second: 20,
        max_active: 40,
        // The burst (20) outlasts the run at four polls a second.
        poll_every: Duration::from_millis(250),
    };
    let options = Options {
        room: Some(plan),
        ..Default::default()
    };
    let report = loadgen::run_with(raid, options)
        .await
        .expect("the run completes");

    assert!(report.passed(), "failed: {:?}", report.failed_checks());
    let names: Vec<_> = report.checks.iter().map(|c| c.name.as_str()).collect();
    for check in [
        "room: polls within budget",
        "room: no sale without a pass",
        "room: a shopper buys once, once admitted",
        "room: units sold = orders",
        "every 200 has its order",
    ] {
        assert!(names.contains(&check), "{check} missing from {names:?}");
    }
    let room = report.room.as_ref().expect("room mode reports the room");
    assert_eq!(
        (room.joined, room.admitted, room.bought),
        (20, 20, 20),
        "{room:?}"
    );
    assert_eq!(room.endings.get("bought"), Some(&20), "{room:?}");
    assert_eq!(report.unknown_outcomes, 0);

    // The ledger against Postgres: exactly its orders, one per user.
    let sale = &report.sale;
    let item = report.item_id;
    assert_eq!(sale.orders as i64, pg_orders(&db, item).await);
    let doubles: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT user_id FROM orders WHERE item_id = $1
         GROUP BY user_id HAVING count(*) > 1) d",
    )
    .bind(item)
    .fetch_one(&db)
    .await
    .expect("count doubles");
    assert_eq!(doubles, 0);

    // Each raider's fourth purchase, or an address's sixth and later, is refused: by
    // user for the ten raiders alone on their address, by user or address for the five
    // pairs (three of eight each, at least two by address); the other 55 pass the
    // limiter and meet the room's gate.
    assert_eq!(sale.attempts, 80 + 20);
    assert_eq!(sale.not_admitted, 55, "{sale:?}");
    let refused = |d: &str| sale.refused.get(d).copied().unwrap_or(0);
    assert_eq!(refused("user") + refused("ip"), 25, "{sale:?}");
    assert!((10..=15).contains(&refused("user")), "{sale:?}");
    assert!(refused("ip") >= 10, "{sale:?}");
    assert_eq!((sale.joined, sale.admitted), (20, 20));
    assert!(sale.first_unix_s <= sale.last_unix_s);

    // The report against both. Its orders are Postgres's own: exact at once. Its history
    // figures come from the stream and the fold: one instance, never killed, so every
    // count reaches Postgres (a failed flush carries its counts to the next record) and
    // the tolerance is 0; sampling touches no count. A killed instance would lose its
    // unflushed second at most (docs/history.md).
    let path = format!("/admin/api/items/{item}/report");
    let (report_body, _) = eventually("the report holds the run", Duration::from_secs(30), || {
        let response = app.admin_get(&path);
        async move {
            let body = json(response.await).await;
            (body["attempts"] == sale.attempts && body["queue"]["admitted"] == sale.admitted)
                .then_some(body)
        }
    })
    .await;
    assert_eq!(
        report_body["orders"]["bought"], sale.orders,
        "{report_body}"
    );
    assert_eq!(report_body["queue"]["joined"], sale.joined, "{report_body}");
    for (dimension, count) in &sale.refused {
        assert_eq!(
            report_body["refused"][dimension], *count,
            "{dimension}: {report_body}"
        );
    }
    let refused_total: u64 = sale.refused.values().sum();
    let reported: u64 = report_body["refused"]
        .as_object()
        .map(|by| by.values().filter_map(|v| v.as_u64()).sum())
        .unwrap_or(0);
    assert_eq!(reported, refused_total, "{report_body}");
    assert_eq!(
        report_body["outcomes"]["not_admitted"], sale.not_admitted,
        "{report_body}"
    );
    assert_eq!(report_body["errors"], 0, "{report_body}");
}
