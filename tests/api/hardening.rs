//! The sale under retries, stampedes, crashes and a Redis that lost its data: one
//! module per kind of abuse, and the helpers they share.

mod crashes;
mod drift;
mod idempotency;
mod order_reads;
mod stampedes;

use sqlx::PgPool;

use seckill_test_support::TestApp;

/// The purchase these tests retry: from one address, with an `Idempotency-Key`.
async fn purchase_with_key(app: &TestApp, token: &str, item: i64, key: &str) -> reqwest::Response {
    app.post_seckill_with(token, item, "10.20.0.1", None, Some(key))
        .await
}

/// A quick reconciler: deadlines and periods short enough for a test to watch (the
/// deadline just above what `configuration::safety::timeouts` asks for).
fn fast_reconciler(s: &mut seckill::configuration::Settings) {
    s.order_commit_timeout_ms = 300;
    s.database_statement_timeout_ms = 500;
    s.database_idle_in_transaction_timeout_ms = 500;
    s.reservation_deadline_ms = 2_500;
    s.reconcile_interval_ms = 200;
}

/// In this test's own database, orders of the `landing` users wait `seconds` at COMMIT
/// and then commit; orders of the `failing` users wait as long and then fail. A deferred
/// constraint trigger runs inside COMMIT, so the app has sent its COMMIT and hears
/// nothing meanwhile.
async fn slow_commits(db: &PgPool, seconds: f64, landing: &[i64], failing: &[i64]) {
    // Built from numbers only (the test's own ids and a duration).
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        r#"CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.user_id = ANY(ARRAY[{landing}, {failing}]::bigint[]) THEN
               PERFORM pg_sleep({seconds});
             END IF;
             IF NEW.user_id = ANY(ARRAY[{failing}]::bigint[]) THEN
               RAISE EXCEPTION 'refused at commit';
             END IF;
             RETURN NULL;
           END $$;
           CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON orders
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();"#,
        landing = ids(landing),
        failing = ids(failing),
    )))
    .execute(db)
    .await
    .unwrap();
}

/// `[1, 2]` → `1,2`; `[]` → `NULL` (a valid, matching-nothing array element).
fn ids(users: &[i64]) -> String {
    if users.is_empty() {
        return "NULL".into();
    }
    users
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
