-- Items on sale and the orders placed for them.
-- Postgres is the final guard against overselling: `remaining` can never go negative
-- and a user can hold at most one order per item, whatever Redis believes.

CREATE TABLE items (
    id              BIGSERIAL PRIMARY KEY,
    name            TEXT        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    price_cents     BIGINT      NOT NULL CHECK (price_cents >= 0),
    total_stock     INTEGER     NOT NULL CHECK (total_stock >= 1),
    remaining_stock INTEGER     NOT NULL CHECK (remaining_stock >= 0),
    starts_at       TIMESTAMPTZ NOT NULL,
    ends_at         TIMESTAMPTZ NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT items_remaining_within_total CHECK (remaining_stock <= total_stock),
    CONSTRAINT items_ends_after_start CHECK (ends_at > starts_at)
);

CREATE TABLE orders (
    id         UUID        PRIMARY KEY,
    user_id    BIGINT      NOT NULL CHECK (user_id > 0),
    item_id    BIGINT      NOT NULL REFERENCES items (id),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT orders_one_per_user_and_item UNIQUE (user_id, item_id)
);

CREATE INDEX orders_item_id_created_at ON orders (item_id, created_at DESC);
CREATE INDEX orders_created_at ON orders (created_at DESC);
