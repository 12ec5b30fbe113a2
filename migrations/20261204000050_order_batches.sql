-- Issue 38: one row per batch commit, written by the batch's own statement (its key, chosen by the
-- app, UUID v7): the fence that settles a commit whose answer never came. Whoever
-- inserts a batch's key first wins: the batch's statement (then its orders are written
-- with it) or the app settling it after losing the answer (then the statement, should it
-- still arrive, writes nothing). Rows older than an hour are deleted by the reconciler.
CREATE TABLE order_batches (
    id uuid PRIMARY KEY
);
