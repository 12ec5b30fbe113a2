-- The sale's memory (docs/history.md): the decision stream folded minute by minute, the
-- refusal samples, the offenders' sketches, and the operator's blocks.

-- The records already folded: the fold's idempotency key. A record redelivered after an
-- instance died (XAUTOCLAIM) finds its row here and adds nothing.
CREATE TABLE history_records (
    instance  TEXT        NOT NULL,
    second    BIGINT      NOT NULL,
    folded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (instance, second)
);
CREATE INDEX history_records_folded_at ON history_records (folded_at);

-- Per item, minute and purchase outcome (`rejected:<rule>` for a limiter refusal).
CREATE TABLE history_items (
    item_id BIGINT      NOT NULL,
    minute  TIMESTAMPTZ NOT NULL,
    outcome TEXT        NOT NULL,
    count   BIGINT      NOT NULL,
    PRIMARY KEY (item_id, minute, outcome)
);

-- Per policy, minute, rule and decision (stats::record::DecisionCount's outcomes).
CREATE TABLE history_decisions (
    policy  TEXT        NOT NULL,
    minute  TIMESTAMPTZ NOT NULL,
    rule    TEXT        NOT NULL,
    outcome TEXT        NOT NULL,
    count   BIGINT      NOT NULL,
    PRIMARY KEY (policy, minute, rule, outcome)
);

-- Per item and minute, its waiting room. `waits`: admissions by wait bucket
-- (stats::record::WAIT_BUCKETS_SECS, and one over the last).
CREATE TABLE history_rooms (
    item_id    BIGINT      NOT NULL,
    minute     TIMESTAMPTZ NOT NULL,
    joins      BIGINT      NOT NULL DEFAULT 0,
    admissions BIGINT      NOT NULL DEFAULT 0,
    abandons   BIGINT      NOT NULL DEFAULT 0,
    waits      BIGINT[]    NOT NULL DEFAULT '{}',
    PRIMARY KEY (item_id, minute)
);

-- Each instance's heavy hitters of each minute, as its sketch shipped them; a window's
-- offenders are their merge (kind: user, ip, join_ip, join_block; item_id 0: none).
CREATE TABLE history_hitters (
    minute     TIMESTAMPTZ NOT NULL,
    instance   TEXT        NOT NULL,
    kind       TEXT        NOT NULL,
    value      TEXT        NOT NULL,
    item_id    BIGINT      NOT NULL DEFAULT 0,
    count      BIGINT      NOT NULL,
    error      BIGINT      NOT NULL DEFAULT 0,
    dimensions JSONB       NOT NULL DEFAULT '{}',
    others     BIGINT      NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, instance, kind, value, item_id)
);

-- One refusal in N, whole. Personal data: kept history.sample_retention_days, read only
-- through the admin API.
CREATE TABLE refusal_samples (
    at       TIMESTAMPTZ NOT NULL,
    instance TEXT        NOT NULL,
    policy   TEXT        NOT NULL,
    rule     TEXT        NOT NULL,
    user_id  BIGINT,
    ip       TEXT,
    item_id  BIGINT
);
CREATE INDEX refusal_samples_at ON refusal_samples (at);

-- The operator's blocks in force (value normalised as the limiter keys it: an IPv6
-- address by its /64), and every change to them.
CREATE TABLE blocks (
    kind       TEXT        NOT NULL CHECK (kind IN ('user', 'ip')),
    value      TEXT        NOT NULL,
    until      TIMESTAMPTZ NOT NULL,
    reason     TEXT        NOT NULL,
    created_by TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, value)
);

CREATE TABLE block_audit (
    id         BIGSERIAL   PRIMARY KEY,
    kind       TEXT        NOT NULL,
    value      TEXT        NOT NULL,
    action     TEXT        NOT NULL CHECK (action IN ('block', 'unblock')),
    seconds    BIGINT,
    reason     TEXT        NOT NULL DEFAULT '',
    changed_by TEXT        NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
