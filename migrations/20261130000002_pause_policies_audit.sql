-- Operators pause and resume sales, and edit rate-limit rules at runtime.

ALTER TABLE items ADD COLUMN paused BOOLEAN NOT NULL DEFAULT false;

-- Rate-limit policies: seeded from the settings on first start, then Postgres is the
-- truth. `config` holds a whole policy (algorithm, fail mode, rules) as the app's
-- settings spell it, so a policy is read and replaced as one value.
CREATE TABLE limiter_policies (
    name       TEXT        PRIMARY KEY,
    config     JSONB       NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Every change to a policy: who (the admin token's name), when, before and after.
CREATE TABLE limiter_policy_audit (
    id         BIGSERIAL   PRIMARY KEY,
    policy     TEXT        NOT NULL REFERENCES limiter_policies (name),
    changed_by TEXT        NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    old_config JSONB       NOT NULL,
    new_config JSONB       NOT NULL
);

CREATE INDEX limiter_policy_audit_policy ON limiter_policy_audit (policy, changed_at DESC);
