-- The order life cycle: a won click reserves a unit; it is a sale once paid. An order
-- starts `pending_payment` with a deadline (`pay_by`) and ends `paid`, `cancelled` or
-- `expired`; only those three transitions exist, each a conditional UPDATE on the state,
-- so two of them racing (a payment at the deadline, the sweeper) cannot both win.
--
-- A cancelled or expired order gives its unit back: in Postgres in the same transaction
-- as its state change (`items.remaining_stock + 1`), in Redis afterwards (stock, buyer
-- mark, success counter, orders hash). `returned_at` is set once Redis has it back, so
-- an order with `returned_at IS NULL` still holds a unit in Redis: every live order, and
-- a dead one whose Redis give-back has not happened yet (a crash between the two stores
-- leaves it for the next sweep, which finishes it exactly once).
--
-- Orders placed before this migration were final sales: they become `paid`.

ALTER TABLE orders
    ADD COLUMN state TEXT NOT NULL DEFAULT 'paid'
        CHECK (state IN ('pending_payment', 'paid', 'cancelled', 'expired')),
    ADD COLUMN pay_by TIMESTAMPTZ,
    ADD COLUMN state_changed_at TIMESTAMPTZ,
    ADD COLUMN returned_at TIMESTAMPTZ,
    ADD CONSTRAINT orders_pending_has_deadline CHECK (state <> 'pending_payment' OR pay_by IS NOT NULL),
    ADD CONSTRAINT orders_only_dead_return CHECK (returned_at IS NULL OR state IN ('cancelled', 'expired'));
-- From now on every insert names its state (the committer's: `pending_payment` with a
-- deadline); a default could only hide a missing one.
ALTER TABLE orders ALTER COLUMN state DROP DEFAULT;

-- One *live* order per user and item: a shopper whose order was cancelled or expired
-- may buy again (when the sale allows it). The committer's ON CONFLICT names this index
-- by its columns and predicate.
ALTER TABLE orders DROP CONSTRAINT orders_one_per_user_and_item;
CREATE UNIQUE INDEX orders_one_live_per_user_and_item ON orders (user_id, item_id)
    WHERE state IN ('pending_payment', 'paid');

-- The sweeper's two questions: which pending orders are past their deadline, and which
-- dead orders still owe Redis their unit.
CREATE INDEX orders_pending_pay_by ON orders (pay_by) WHERE state = 'pending_payment';
CREATE INDEX orders_unreturned ON orders (item_id)
    WHERE state IN ('cancelled', 'expired') AND returned_at IS NULL;
CREATE INDEX orders_state_item ON orders (item_id, state);
