-- A waiting room per item (off unless a row says otherwise): the operators' settings of
-- its queue. `order_kind` 'fifo' admits in the order of joining (those who joined
-- during the pre-queue shuffled at the sale's start), 'random' shuffles every second's
-- joiners too. Every change bumps `version`.
CREATE TABLE waiting_rooms (
    item_id            BIGINT      PRIMARY KEY REFERENCES items (id),
    enabled            BOOLEAN     NOT NULL,
    order_kind         TEXT        NOT NULL CHECK (order_kind IN ('fifo', 'random')),
    prequeue_starts_at TIMESTAMPTZ,
    admit_per_second   INTEGER     NOT NULL CHECK (admit_per_second BETWEEN 1 AND 100000),
    max_active         INTEGER     NOT NULL CHECK (max_active BETWEEN 1 AND 1000000),
    pass_ttl_secs      INTEGER     NOT NULL CHECK (pass_ttl_secs BETWEEN 10 AND 3600),
    abandon_after_secs INTEGER     NOT NULL CHECK (abandon_after_secs BETWEEN 10 AND 3600),
    version            BIGINT      NOT NULL DEFAULT 1 CHECK (version >= 1),
    changed_at         TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The shuffles, so an audit can replay them: round 0 is the pre-queue (its joiners'
-- indexes 0 … size-1), each later round a second's joiners after the start (random
-- order only), starting at `first_index` of those. A place is the round's offset plus
-- the seeded permutation of the joiner's index within the round (`sale::room::shuffle`).
CREATE TABLE waiting_room_rounds (
    item_id     BIGINT      NOT NULL REFERENCES items (id),
    round       INTEGER     NOT NULL CHECK (round >= 0),
    first_index BIGINT      NOT NULL CHECK (first_index >= 0),
    size        BIGINT      NOT NULL CHECK (size >= 0),
    seed        BIGINT      NOT NULL,
    sealed_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (item_id, round)
);
