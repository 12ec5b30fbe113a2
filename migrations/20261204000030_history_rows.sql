-- The rows of `GET /admin/api/history` (docs/history.md, "History and reports"), in one
-- place so that the answer, its row count (checked against history.max_rows before the
-- first byte is sent) and the report per sale read the same thing.
--
-- Minutes in [from_at, to_at), summed per `step` ('minute' or 'hour', in UTC), in the
-- long form one CSV header fits: a source (`item`: history_items; `decision`:
-- history_decisions; `room`: history_rooms, its joins, admissions, abandons and one
-- row per wait bucket, `wait_le_<bound>` or `wait_over_<last bound>` with `bounds` the
-- buckets' bounds, stats::record::WAIT_BUCKETS_SECS), an item (0: none), a policy and
-- a rule ('': none), an outcome and a count. `item_id` narrows the item and room rows,
-- `policy_name` the decision rows (NULL: every one); `with_items` and
-- `with_decisions` leave out a source altogether. Rows summing to 0 are left out.
CREATE FUNCTION history_rows(
    step           TEXT,
    from_at        TIMESTAMPTZ,
    to_at          TIMESTAMPTZ,
    item_id        BIGINT,
    policy_name    TEXT,
    with_items     BOOLEAN,
    with_decisions BOOLEAN,
    bounds         BIGINT[]
) RETURNS TABLE (
    at      TIMESTAMPTZ,
    source  TEXT,
    item    BIGINT,
    policy  TEXT,
    rule    TEXT,
    outcome TEXT,
    count   BIGINT
) LANGUAGE sql STABLE AS $$
    SELECT r.at, r.source, r.item, r.policy, r.rule, r.outcome, sum(r.count)::BIGINT
    FROM (
        SELECT date_trunc(step, h.minute, 'UTC') AS at, 'item' AS source, h.item_id AS item,
               '' AS policy, '' AS rule, h.outcome, h.count
        FROM history_items h
        WHERE with_items AND h.minute >= from_at AND h.minute < to_at
          AND (history_rows.item_id IS NULL OR h.item_id = history_rows.item_id)
        UNION ALL
        SELECT date_trunc(step, d.minute, 'UTC'), 'decision', 0, d.policy, d.rule, d.outcome,
               d.count
        FROM history_decisions d
        WHERE with_decisions AND d.minute >= from_at AND d.minute < to_at
          AND (policy_name IS NULL OR d.policy = policy_name)
        UNION ALL
        SELECT date_trunc(step, m.minute, 'UTC'), 'room', m.item_id, '', '', c.outcome, c.count
        FROM history_rooms m
        CROSS JOIN LATERAL (
            VALUES ('joins', m.joins), ('admissions', m.admissions), ('abandons', m.abandons)
        ) AS c (outcome, count)
        WHERE with_items AND m.minute >= from_at AND m.minute < to_at
          AND (history_rows.item_id IS NULL OR m.item_id = history_rows.item_id)
        UNION ALL
        SELECT date_trunc(step, m.minute, 'UTC'), 'room', m.item_id, '', '',
               CASE WHEN w.i <= cardinality(bounds) THEN 'wait_le_' || bounds[w.i]
                    ELSE 'wait_over_' || bounds[cardinality(bounds)] END,
               w.n
        FROM history_rooms m
        CROSS JOIN LATERAL unnest(m.waits) WITH ORDINALITY AS w (n, i)
        WHERE with_items AND m.minute >= from_at AND m.minute < to_at
          AND (history_rows.item_id IS NULL OR m.item_id = history_rows.item_id)
    ) r
    GROUP BY r.at, r.source, r.item, r.policy, r.rule, r.outcome
    HAVING sum(r.count) <> 0
$$;
