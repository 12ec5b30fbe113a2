-- An item's life after its creation: operators edit it (name, price, end, stock), end
-- its sale now, and archive it (gone from the shop and the dashboard's default lists;
-- its orders stay). Every change is recorded in `item_audit`, like policy edits.

ALTER TABLE items ADD COLUMN archived_at TIMESTAMPTZ;

-- Who changed what, when: `action` is one of the operators' verbs, `old_values` and
-- `new_values` the fields it changed (JSON, the API's spelling); `old_values` is null
-- for a creation.
CREATE TABLE item_audit (
    id         BIGSERIAL   PRIMARY KEY,
    item_id    BIGINT      NOT NULL REFERENCES items (id),
    action     TEXT        NOT NULL CHECK (action IN ('create', 'edit', 'end', 'archive', 'pause', 'resume')),
    changed_by TEXT        NOT NULL,
    changed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    old_values JSONB,
    new_values JSONB       NOT NULL
);

CREATE INDEX item_audit_item ON item_audit (item_id, changed_at DESC);
