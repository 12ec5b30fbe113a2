//! Room mode (`Options::room`): the item's waiting room turned on before the load, and
//! shoppers (`shopper`) who join it, poll it at the plan's pace and buy with their pass
//! once admitted, beside the load's purchases without one. The shoppers' purchases go to
//! the run's ledger with the load's, so the limit and store checks judge them all; what
//! the room answered goes to the room's own ledger, which the room's checks and the
//! report's `room` read.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use loadtest_core::ledger::Record;
use loadtest_core::report::Check;
use loadtest_core::room::{self, RoomSettings};
use loadtest_core::stores::{order_count, remaining_stock, Stores};

use crate::config::RoomPlan;
use crate::report::RunReport;
use crate::shopper::{self, RoomSeen, Shopper, Trip};

/// The room's settings for a plan: `fifo` (each joiner placed at once, no draw to wait
/// for), no pre-queue, passes and places that outlast any run of loadgen.
fn settings(plan: &RoomPlan) -> RoomSettings {
    RoomSettings {
        random: false,
        prequeue_from: None,
        admit_per_second: plan.admit_per_second,
        max_active: plan.max_active,
        pass_ttl_secs: 300,
        abandon_after_secs: 300,
    }
}

/// Turns `item`'s room on through `target`'s admin API.
pub(crate) async fn turn_on(
    client: &reqwest::Client,
    target: &str,
    admin_token: &str,
    item: i64,
    plan: &RoomPlan,
) -> anyhow::Result<()> {
    room::set_room(client, target, admin_token, item, &settings(plan)).await
}

/// Room mode's part of a run, set up before the load.
pub(crate) struct RoomMode {
    plan: RoomPlan,
    /// Taken by [`RoomMode::shop`].
    shoppers: Vec<Shopper>,
    /// The shoppers' user ids.
    ids: Range<i64>,
    /// Postgres's remaining stock of the item before the load, with the stores.
    remaining_before: Option<i64>,
}

/// Where a run's shoppers come from: users from `first_user`, addresses from
/// `first_ip`, tokens from `session_target`, homes round-robin over `targets`.
pub(crate) struct Cast<'a> {
    pub(crate) session_target: &'a str,
    pub(crate) targets: usize,
    pub(crate) first_user: i64,
    pub(crate) first_ip: u32,
}

impl RoomMode {
    /// Before the load: the shoppers logged in, the item's stock read (with the stores).
    pub(crate) async fn prepare(
        client: &reqwest::Client,
        plan: &RoomPlan,
        cast: Cast<'_>,
        stores: Option<&Stores>,
        item: i64,
    ) -> anyhow::Result<Self> {
        let shoppers = shopper::log_in(
            client,
            cast.session_target,
            cast.targets,
            plan.shoppers,
            cast.first_user,
            cast.first_ip,
        )
        .await?;
        let remaining_before = match stores {
            Some(stores) => Some(remaining_stock(stores, item).await?),
            None => None,
        };
        Ok(Self {
            plan: plan.clone(),
            ids: cast.first_user..cast.first_user + shoppers.len() as i64,
            shoppers,
            remaining_before,
        })
    }

    /// The shoppers, each on a task of its own, until each is done or `deadline`; their
    /// purchases go to `ledger`.
    pub(crate) async fn shop(
        &mut self,
        client: &reqwest::Client,
        targets: &[String],
        item: i64,
        start: Instant,
        deadline: Instant,
        ledger: &Arc<Mutex<Vec<Record>>>,
    ) -> anyhow::Result<RoomSeen> {
        let trip = Arc::new(Trip {
            client: client.clone(),
            targets: targets.to_vec(),
            item,
            poll_every: self.plan.poll_every,
            start,
            deadline,
            ledger: Arc::clone(ledger),
            seen: Mutex::default(),
        });
        shopper::run(trip, std::mem::take(&mut self.shoppers)).await
    }

    /// After the load: the room's figures and checks into `report`; with the stores and
    /// the item's orders before the load, "units sold = orders" too.
    pub(crate) async fn judge(
        &self,
        seen: &RoomSeen,
        records: &[Record],
        report: &mut RunReport,
        stores: Option<&Stores>,
        orders_before: Option<i64>,
    ) -> anyhow::Result<()> {
        let bought = records
            .iter()
            .filter(|r| r.status == 200 && self.ids.contains(&r.user))
            .count() as u64;
        report.room = Some(seen.report(self.plan.shoppers, bought));
        report.checks.extend(room_checks(seen, records, &self.ids));
        if let (Some(stores), Some(orders_before), Some(before)) =
            (stores, orders_before, self.remaining_before)
        {
            let item = report.item_id;
            let units_sold = before - remaining_stock(stores, item).await?;
            let new_orders = order_count(stores, item).await? - orders_before;
            let ok = report.count(200) as i64;
            let maybe = report.unknown_outcomes as i64 + report.count(202) as i64;
            report
                .checks
                .push(units_check(units_sold, new_orders, ok, maybe));
        }
        Ok(())
    }
}

/// The room's own checks, from the ledgers: polls at loadgen's pace stayed within the
/// poll budget; no purchase without a pass sold; a shopper bought at most once, and
/// only after it was admitted. `shoppers` are the shoppers' user ids.
pub(crate) fn room_checks(
    seen: &RoomSeen,
    records: &[Record],
    shoppers: &Range<i64>,
) -> Vec<Check> {
    let too_fast = seen.polls.get("429 POLLING_TOO_FAST").copied().unwrap_or(0);
    let polls: u64 = seen.polls.values().sum();
    let bare_sold = records
        .iter()
        .filter(|r| r.status == 200 && !shoppers.contains(&r.user))
        .count();
    let bare = records
        .iter()
        .filter(|r| !shoppers.contains(&r.user))
        .count();
    let mut bought: HashMap<i64, u32> = HashMap::new();
    for r in records.iter().filter(|r| r.status == 200) {
        *bought.entry(r.user).or_default() += 1;
    }
    let twice = bought.values().filter(|&&n| n > 1).count();
    let unadmitted = bought
        .keys()
        .filter(|user| shoppers.contains(user) && !seen.admitted.contains(user))
        .count();
    vec![
        Check {
            name: "room: polls within budget".into(),
            passed: too_fast == 0,
            detail: format!("{too_fast} of {polls} polls answered 429 POLLING_TOO_FAST"),
        },
        Check {
            name: "room: no sale without a pass".into(),
            passed: bare_sold == 0,
            detail: format!("{bare_sold} of {bare} purchases without a pass answered 200"),
        },
        Check {
            name: "room: a shopper buys once, once admitted".into(),
            passed: twice == 0 && unadmitted == 0,
            detail: format!(
                "{} shoppers bought; {twice} bought twice, {unadmitted} without having been admitted",
                bought.len()
            ),
        },
    ]
}

/// "Units sold = orders": the units the item lost over the run (Postgres's
/// `remaining_stock` before and after), the orders it gained and the purchases answered
/// 200 are one number; answers lost or pending (`maybe`) may each stand for one more.
pub(crate) fn units_check(units_sold: i64, new_orders: i64, ok: i64, maybe: i64) -> Check {
    Check {
        name: "room: units sold = orders".into(),
        passed: units_sold == new_orders && (ok..=ok + maybe).contains(&new_orders),
        detail: format!(
            "{units_sold} units sold, {new_orders} new orders, {ok} answers 200 ({maybe} unknown or pending)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn purchase(user: i64, status: u16, code: Option<&str>) -> Record {
        Record {
            target: 0,
            user,
            ip: 0,
            sent: Duration::ZERO,
            received: Duration::ZERO,
            status,
            code: code.map(str::to_string),
            dimension: None,
            admitted: status != 429,
            failure: None,
            order_id: None,
        }
    }

    fn failed(checks: &[Check]) -> Vec<&str> {
        checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect()
    }

    #[test]
    fn the_room_checks_name_each_breach() {
        let shoppers = 10..20;
        let mut seen = RoomSeen::default();
        seen.admitted.extend([10, 11]);
        seen.polls.insert("200 waiting".into(), 5);
        let honest = vec![
            purchase(1, 403, Some("NOT_ADMITTED")),
            purchase(10, 200, None),
            purchase(11, 200, None),
        ];
        assert_eq!(failed(&room_checks(&seen, &honest, &shoppers)), [""; 0]);

        seen.polls.insert("429 POLLING_TOO_FAST".into(), 1);
        let mut breached = honest.clone();
        breached.push(purchase(1, 200, None));
        breached.push(purchase(12, 200, None));
        breached.push(purchase(10, 200, None));
        assert_eq!(
            failed(&room_checks(&seen, &breached, &shoppers)),
            [
                "room: polls within budget",
                "room: no sale without a pass",
                "room: a shopper buys once, once admitted"
            ]
        );
    }

    #[test]
    fn units_sold_orders_and_200s_must_be_one_number() {
        assert!(units_check(20, 20, 20, 0).passed);
        assert!(units_check(20, 20, 19, 1).passed, "one lost answer");
        assert!(
            !units_check(21, 20, 20, 0).passed,
            "a unit gone without an order"
        );
        assert!(
            !units_check(20, 20, 19, 0).passed,
            "an order without its 200"
        );
    }
}
