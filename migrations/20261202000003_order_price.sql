-- The price an order was bought at (one unit): an operator may change the item's price
-- later, and the order's amount must not follow. Orders from before this column hold
-- NULL and are read at the item's price.
ALTER TABLE orders ADD COLUMN price_cents BIGINT CHECK (price_cents >= 0);
